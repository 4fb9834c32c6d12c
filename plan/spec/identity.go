package spec

// Namespace names a kind of Linux namespace (namespaces(7)) the sandbox
// gets a new one of.
type Namespace string

// The namespaces a sandbox can be given. The names are those of
// /proc/PID/ns, except mount for mnt.
const (
	NamespaceUser   Namespace = "user"   // ids and capabilities: root inside is an unprivileged id outside
	NamespaceMount  Namespace = "mount"  // the root filesystem the plan's mounts build
	NamespacePID    Namespace = "pid"    // only the sandbox's own processes; the init is pid 1
	NamespaceNet    Namespace = "net"    // only lo: the egress proxy is the way out
	NamespaceIPC    Namespace = "ipc"    // System V IPC and POSIX message queues of its own
	NamespaceUTS    Namespace = "uts"    // its own hostname
	NamespaceCgroup Namespace = "cgroup" // its own cgroup is the root of what it sees
)

// DefaultNamespaces returns the namespaces every sandbox gets, in the
// order explain lists them. plan.Compile puts them in every plan.
func DefaultNamespaces() []Namespace {
	return []Namespace{NamespaceUser, NamespaceMount, NamespacePID, NamespaceNet, NamespaceIPC, NamespaceUTS, NamespaceCgroup}
}

// IDMap says who uid and gid 0 inside the sandbox are on the host. It is
// the rule; the runtime picks the number when it starts the sandbox, and
// may record it in HostUID and HostGID.
//
// Only ids 0 to Size-1 are mapped: every other id inside is the overflow
// id (nobody), and nothing inside runs as a host user.
type IDMap struct {
	// Size is how many ids, from 0 up, are mapped: 1, root inside only.
	Size uint32 `json:"size"`

	// A supervisor that is not root maps 0 to its own uid and gid, the
	// only ids an unprivileged user namespace may map (user_namespaces(7)).
	// A root supervisor picks one id at random per run (Pick) from
	// [RootFirst, RootFirst+RootCount), the same for uid and gid: far
	// above ordinary accounts and the usual subordinate id ranges, so two
	// sandboxes never share an identity with each other or with a host
	// user.
	RootFirst uint32 `json:"root_first"`
	RootCount uint32 `json:"root_count"`

	// HostUID and HostGID are the ids the runtime picked for this run.
	// Zero in a compiled plan: the host's root is never mapped.
	HostUID uint32 `json:"host_uid,omitempty"`
	HostGID uint32 `json:"host_gid,omitempty"`
}

// DefaultIDMap returns the id mapping every sandbox gets. plan.Compile puts it
// in every plan.
func DefaultIDMap() IDMap { return IDMap{Size: 1, RootFirst: 1 << 30, RootCount: 1 << 24} }

// Pick returns the host id a root supervisor maps 0 to, from random bits.
func (m IDMap) Pick(random uint32) uint32 { return m.RootFirst + random%max(m.RootCount, 1) }
