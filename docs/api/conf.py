# Sphinx configuration of pydsm's API reference (`make docs`). The pages are
# generated from the package's docstrings; nothing here repeats them.
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "pydsm"
author = "the pydsm developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.intersphinx"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = True
# "Attributes:" sections as fields of their class, not a second description
napoleon_use_ivar = True
# Offline builds: no inventories fetched; references to numpy stay plain text.
intersphinx_mapping = {}
nitpicky = False
html_theme = "alabaster"
exclude_patterns = ["_build"]
