package plan

// The /proc (and /sys) entries that describe the host kernel rather than
// the sandbox. They are one list for every backend: airlock's own init
// applies them after it builds the root, and export/oci writes them as
// linux.maskedPaths and linux.readonlyPaths. Before they were plan data the
// init and the OCI export each had a list, and the lists differed
// (kallsyms, kmsg and sysrq-trigger masked by one, asound by the other,
// sysrq-trigger read-only in runc's); these are their union, and a path
// either list masked is masked.

// DefaultMaskedPaths returns the paths hidden inside: a folder gets an
// empty read-only tmpfs over it, a file an empty read-only file (the
// host's /dev/null, as runc does). Compile puts them in every plan.
func DefaultMaskedPaths() []string {
	return []string{
		"/proc/acpi", "/proc/asound", "/proc/firmware", "/proc/kallsyms", "/proc/kcore", "/proc/keys",
		"/proc/kmsg", "/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/sysrq-trigger",
		"/proc/timer_list", "/proc/timer_stats", "/sys/firmware",
	}
}

// DefaultReadonlyPaths returns the paths made read-only inside: the
// kernel's tunables and bus and filesystem controls. Compile puts them in
// every plan.
func DefaultReadonlyPaths() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}
}
