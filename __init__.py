"""ComfyUI loads this file when the repository is cloned into custom_nodes/.

It loads host-plugin/ (a folder name that is not an importable identifier) as a
subpackage, so the plugin's relative imports work however ComfyUI names us.
"""
import importlib.util as _util
import os as _os
import sys as _sys

_dir = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "host-plugin")
_name = f"{__name__}.host_plugin"
_spec = _util.spec_from_file_location(_name, _os.path.join(_dir, "__init__.py"), submodule_search_locations=[_dir])
_module = _util.module_from_spec(_spec)
_sys.modules[_name] = _module
_spec.loader.exec_module(_module)

NODE_CLASS_MAPPINGS = _module.NODE_CLASS_MAPPINGS
NODE_DISPLAY_NAME_MAPPINGS = _module.NODE_DISPLAY_NAME_MAPPINGS
# ComfyUI serves this folder at /extensions/<folder>/ and loads its scripts: the account menu (web/authsvc-menu.js).
WEB_DIRECTORY = "./web"
