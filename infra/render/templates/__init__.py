"""Jinja2 templates of ``nsb-delays render`` (a package so the wheel ships them as package data)."""
