"""Jinja2 templates of the migration preview report (a package so that installs ship the .j2 files)."""
