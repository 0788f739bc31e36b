"""Tasks: node classification, link prediction, embed."""
