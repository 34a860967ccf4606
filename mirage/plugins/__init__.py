"""Built-in plugins, loaded through the same manager as third-party ones."""
