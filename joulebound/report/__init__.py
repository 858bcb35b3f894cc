"""Reports: tables, plots and HTML pages."""
