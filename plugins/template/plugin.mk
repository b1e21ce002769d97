# SPDX-License-Identifier: Apache-2.0
# The template plugin is an example: built into the build tree, where the
# tests load it, but not installed as a plugin. make install puts its sources
# under $(DATADIR)/doc/fldispatch/examples/template/.
PLUGIN_EXAMPLE_template := yes
