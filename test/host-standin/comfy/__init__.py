"""The stand-in's `comfy` package: only what custom nodes and the plugin reach for (cli_args)."""
