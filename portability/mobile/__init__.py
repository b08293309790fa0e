"""Mobile platform helpers that are not converters or runtimes: the ARM64 emulation environment."""
