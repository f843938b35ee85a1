"""Reports and views of a store: report.md / report.html, plots, accuracy against k, compare, show, export."""
