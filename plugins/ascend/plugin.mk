# The ascend plugin needs no SDK: CANN is opened with dlopen() at load time.
PLUGIN_LIBS_ascend = -ldl
