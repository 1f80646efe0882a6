"""The console's pages, one module each; every handler takes a :class:`gateway.console.web.Ctx`."""
