"""Pure values and policies: no I/O, no asyncio, no redis, no Django."""
