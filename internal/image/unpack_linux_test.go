package image

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// probeArg0 is the argv[0] of a child that confines itself as the unpack
// does and then tries what a taken-over unpack would.
const probeArg0 = "airlock-image-probe"

// probeChild confines itself in the mode of its argv[2], receives a
// canary folder (Name) and a listening TCP address (Error) from the
// test, tries to reach them, the host's files, mounts and capabilities,
// and sends what worked: "what=true|false" for each.
func probeChild() {
	runtime.LockOSThread()
	root, err := confine(os.Args[2], os.Args[5])
	if err != nil {
		_ = send(childSock, message{Op: "confine", Error: err.Error()}, -1)
		os.Exit(1)
	}
	m, _, err := recv(childSock)
	if err != nil {
		os.Exit(1)
	}
	var out []string
	try := func(what string, err error) { out = append(out, fmt.Sprintf("%s=%v", what, err == nil)) }
	fd, err := unix.Openat(root, "probe", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err == nil {
		unix.Close(fd)
	}
	try("write-root", err)
	_, err = os.ReadFile(m.Name + "/file")
	try("read-canary", err)
	try("write-canary", os.WriteFile(m.Name+"/file", []byte("pwned"), 0o644))
	try("chmod-canary", os.Chmod(m.Name+"/dir", 0o777))
	try("symlink-out", unix.Symlinkat(m.Name+"/dir", root, "out"))
	_, err = os.ReadFile("/out/secret")
	try("read-through-symlink", err)
	_, err = os.ReadFile("/etc/passwd")
	try("read-etc-passwd", err)
	try("mount", unix.Mount("tmpfs", "/", "tmpfs", 0, ""))
	c, err := net.DialTimeout("tcp", m.Error, 2*time.Second)
	if err == nil {
		c.Close()
	}
	try("connect", err)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	err = unix.Capget(&hdr, &data[0])
	if err == nil && data[0].Effective|data[1].Effective|data[0].Permitted|data[1].Permitted != 0 {
		err = nil
	} else {
		err = fmt.Errorf("none")
	}
	try("caps", err)
	_ = send(childSock, message{Op: "done", Error: strings.Join(out, " ")}, -1)
	os.Exit(0)
}

// TestChildConfinement: the unpack's child, confined in either mode,
// runs as an unprivileged uid (not root) and can write only below the
// new entry's root: a canary folder of the host, the host's /etc/passwd,
// a symlink it makes to the canary, mounts, TCP to a listener on the
// host's loopback and capabilities are all out of its reach. This is what
// stands between a bug in the extractor and the host.
func TestChildConfinement(t *testing.T) {
	eachMode(t, func(t *testing.T) {
		can := newCanary(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := make(chan bool, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Close()
			}
			got <- err == nil
		}()
		c, err := openCache(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		uid, gid := childIDs(c)
		tmp, err := c.newTemp(uid, gid)
		if err != nil {
			t.Fatal(err)
		}
		defer c.drop(tmp)
		ch, err := startChild(probeArg0, phaseResolve, testMode, nil, "dir", tmp.rootFD, filepath.Join(c.dir, tmp.name, entryRoot), uid, gid, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.stop()
		if err := send(ch.sock, message{Op: "probe", Name: can.dir, Error: ln.Addr().String()}, -1); err != nil {
			t.Fatal(err)
		}
		m, _, err := recv(ch.sock)
		if err != nil || m.Op != "done" {
			t.Fatalf("probe: %+v %v%s", m, err, ch.stderr.said())
		}
		want := "write-root=true read-canary=false write-canary=false chmod-canary=false symlink-out=true read-through-symlink=false read-etc-passwd=false mount=false connect=false caps=false"
		if m.Error != want {
			t.Errorf("the confined child could do:\n%s\nwant:\n%s", m.Error, want)
		}
		can.check(t)
		var st unix.Stat_t
		if err := unix.Fstatat(tmp.rootFD, "probe", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || int(st.Uid) != uid || os.Geteuid() == 0 && st.Uid == 0 {
			t.Errorf("the child's file is owned by uid %d (%v), want %d (never root)", st.Uid, err, uid)
		}
		ln.Close()
		if <-got {
			t.Errorf("the confined child connected to the host's loopback")
		}
	})
}

// noUserNSEnv makes the test binary the child of
// TestUnpackWithoutUserNamespaces.
const noUserNSEnv = "AIRLOCK_IMAGE_TEST_NO_USERNS"

// noUserNSChild runs in a user namespace where no more may be made: it
// unpacks the layout named by the environment (the hostile layers of
// TestAttackHostileLayers' kind, next to a canary) and prints what Unpack
// said.
func noUserNSChild() {
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0\n"), 0o644); err != nil {
		fmt.Println("set max_user_namespaces:", err)
		os.Exit(0)
	}
	u, err := Unpack(os.Getenv(noUserNSEnv), os.Getenv(noUserNSEnv+"_CACHE"), Options{})
	if err != nil {
		fmt.Println("unpack:", err)
		os.Exit(0)
	}
	b, _ := os.ReadFile(filepath.Join(u.Dir, "usr/who"))
	fmt.Printf("unpacked %s\n", b)
	os.Exit(0)
}

// TestUnpackWithoutUserNamespaces: where user namespaces cannot be made
// (here a user namespace whose max_user_namespaces is 0), the unpack
// falls back to Landlock alone, and a hostile layer still changes nothing
// outside the entry.
func TestUnpackWithoutUserNamespaces(t *testing.T) {
	airtest.RequireRoot(t) // a user namespace mapping every id, for the child's unprivileged uid
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	can := newCanary(t)
	src := layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), file("usr/who", "good"), {name: "x/", typ: 0x35, mode: 0o777}, symlink("x", can.dir+"/dir"), symlink("l", can.dir), file("l/file", "pwned")}}, nil)
	// The hostile part ("l/file" through a symlink) is refused: unpack
	// the good part alone too, to see the fallback work.
	good := layout(t, [][]entry{{dir("usr/"), dir("usr/lib/"), file("usr/who", "good"), {name: "x/", typ: 0x35, mode: 0o777}, symlink("x", can.dir+"/dir")}}, nil)
	for _, tt := range []struct{ name, src, want string }{
		{"hostile", src, "is a symlink"},
		{"good", good, "unpacked good"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("/proc/self/exe", "-test.run=^$")
			cmd.Env = append(os.Environ(), noUserNSEnv+"="+tt.src, noUserNSEnv+"_CACHE="+t.TempDir())
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
				// The unpack's child drops the supplementary groups.
				GidMappingsEnableSetgroups: true,
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("child: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("Unpack without user namespaces said %q, want %q", strings.TrimSpace(out.String()), tt.want)
			}
			can.check(t)
		})
	}
}

// TestUnpackNeverUnconfined: when the child cannot confine itself in any
// way it knows, Unpack refuses, saying why, and leaves nothing in the
// cache.
func TestUnpackNeverUnconfined(t *testing.T) {
	testMode = "no-such-confinement"
	defer func() { testMode = "" }()
	cache := t.TempDir()
	_, err := Unpack(layout(t, [][]entry{{dir("usr/"), dir("usr/lib/")}}, nil), cache, Options{})
	if err == nil || !strings.Contains(err.Error(), "never unpacks an image unconfined") {
		t.Errorf("Unpack with no confinement = %v", err)
	}
	if es, _ := os.ReadDir(cache); len(es) != 0 {
		t.Errorf("the cache keeps %v", es)
	}
}
