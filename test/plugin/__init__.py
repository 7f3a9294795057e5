"""The host plugin's unittest suite, run against a fake sidecar (see support.py).

Run: cd <repo> && /usr/bin/python3 -m unittest discover -s test/plugin -p 'test_*.py' -t .
"""
