"""Config-group schemas, one module per component family (see launcher.config)."""
