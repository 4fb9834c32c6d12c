package doctor

// ProbeNamespaceMount is probeNamespaceMount, which the Linux tests run
// on the real host.
var ProbeNamespaceMount = probeNamespaceMount
