"""Server-rendered status page (HTML + inline SVG, no JS, no CDN)."""
