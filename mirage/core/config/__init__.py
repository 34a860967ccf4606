"""The typed run configuration, components' own options, overrides, presets, old layouts."""
