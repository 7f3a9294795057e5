"""Makes test/ a package so `python3 -m unittest discover -s test/plugin -t .` imports
test.plugin.* from here rather than the standard library's own `test` package."""
