# Stand-in for ComfyUI's comfyui_version.py (the captured server's version).
__version__ = "0.3.64"
