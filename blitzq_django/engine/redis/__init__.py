"""Redis adapter: key names, Lua scripts, operations and the stores that run them."""
