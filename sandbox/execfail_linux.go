package sandbox

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// When execve(2) of an allowed tool fails inside the sandbox, the errno
// rarely names the cause: ENOENT for a script means its #! interpreter is
// missing, and for an ELF file its dynamic loader. The supervisor reads the
// tool's host file (the bind's source) to say which, and suggests the
// allowed_tools entries that would let it start. It only reads files the
// plan bound from the host, never anything the sandbox wrote.

// maxInterpDepth is how many #! interpreters deep the diagnosis follows,
// as the kernel does (BINPRM_MAX_RECURSION in fs/exec.c).
const maxInterpDepth = 4

// headSize is how much of a file the kernel reads for its #! line
// (BINPRM_BUF_SIZE).
const headSize = 256

// execDiagnosis says why a tool did not start.
type execDiagnosis struct {
	cause string            // what was wrong, for the report's error and the denial's message
	hint  string            // what the program can do about it within its grants
	fix   policy.Suggestion // the allowed_tools entries that would let it start
}

// diagnoseExec explains why tool (its path inside the sandbox) could not be
// executed. It names the first missing #! interpreter, env program or
// dynamic loader on the way and suggests allowing every missing one, so
// that applying the suggestion lets the tool start.
func diagnoseExec(pl *plan.Plan, p *policy.Policy, tool string) execDiagnosis {
	if pl == nil {
		return execDiagnosis{}
	}
	real := toolSource(pl, tool)
	if real == "" {
		return execDiagnosis{}
	}
	var d execDiagnosis
	var missing []string
	name := tool
	for range maxInterpDepth + 1 {
		head, err := readHead(real)
		if err != nil {
			return d
		}
		interp, arg, isScript := shebang(head)
		if !isScript {
			loader, isELF := elfLoader(real)
			switch {
			case !isELF:
				if len(missing) == 0 {
					d.cause = strconv.Quote(name) + " is neither an ELF executable nor a script starting with #!"
				}
			case loader != "" && !runnableInside(pl, loader, true):
				if !executableIn(pl.Rootfs, loader) {
					d.cause = firstCause(d.cause, "the dynamic loader "+strconv.Quote(loader)+" of "+strconv.Quote(name)+" does not exist on this host")
					return d
				}
				d.cause = firstCause(d.cause, "the dynamic loader "+strconv.Quote(loader)+" of "+strconv.Quote(name)+" (its ELF interpreter) is not in the sandbox")
				missing = append(missing, loader)
			}
			break
		}
		if interp == "" || !strings.HasPrefix(interp, "/") {
			d.cause = firstCause(d.cause, "the #! line of "+strconv.Quote(name)+" names no absolute interpreter")
			return d
		}
		if !runnableInside(pl, interp, false) {
			if !executableIn(pl.Rootfs, interp) {
				d.cause = firstCause(d.cause, strconv.Quote(name)+" is a script whose #! interpreter "+strconv.Quote(interp)+" does not exist on this host")
				return d
			}
			d.cause = firstCause(d.cause, strconv.Quote(name)+" is a script whose #! interpreter "+strconv.Quote(interp)+" is not an allowed tool, so it is not in the sandbox")
			missing = append(missing, interp)
		}
		next, err := realPath(pl.Rootfs, interp)
		if err != nil {
			return d
		}
		if prog := envProgram(interp, arg); prog != "" && !toolOnPath(pl, prog) {
			// env looks prog up on the sandbox's PATH, where only tools are.
			_, progReal, err := (&hostFS{root: pl.Rootfs}).LookTool(prog)
			if err != nil {
				d.cause = firstCause(d.cause, strconv.Quote(name)+" runs "+strconv.Quote(prog)+" through env, and no executable of that name exists on this host")
				return d
			}
			d.cause = firstCause(d.cause, strconv.Quote(name)+" runs "+strconv.Quote(prog)+" through env, and "+strconv.Quote(prog)+" is not an allowed tool")
			missing = append(missing, prog)
			name, real = prog, progReal
			continue
		}
		name, real = interp, next
	}
	if len(missing) == 0 {
		if d.cause == "" {
			d.cause = strconv.Quote(tool) + " and what it needs to start are in the sandbox"
			d.hint = "check that the working directory exists inside the sandbox"
		}
		return d
	}
	d.fix = p.SuggestTools(missing...)
	return d
}

// firstCause keeps the first cause found: it is the one the kernel hit.
func firstCause(have, c string) string {
	if have != "" {
		return have
	}
	return c
}

// toolSource returns the host file bound at tool, or "".
func toolSource(pl *plan.Plan, tool string) string {
	for _, m := range pl.Mounts {
		if m.Kind == plan.KindBind && m.Exec && m.Target == tool {
			return m.Source
		}
	}
	return ""
}

// openRegular opens a regular host file for reading without following a
// symlink at its end, blocking on a fifo or opening a device (checked
// before the open, and again on the open file).
func openRegular(file string) (*os.File, error) {
	if fi, err := os.Lstat(file); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New(file + ": not a regular file")
	}
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errors.New(file + ": not a regular file")
	}
	return f, nil
}

// readHead reads the first headSize bytes of a regular host file.
func readHead(file string) ([]byte, error) {
	f, err := openRegular(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, headSize)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}

// shebang parses a #! line as Linux does (fs/binfmt_script.c): the
// interpreter is the first word, and the rest of the line, trimmed, is its
// one optional argument.
func shebang(head []byte) (interp, arg string, ok bool) {
	line, found := bytes.CutPrefix(head, []byte("#!"))
	if !found {
		return "", "", false
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	s := strings.Trim(string(line), " \t")
	interp, arg, _ = strings.Cut(s, " ")
	if i := strings.IndexByte(interp, '\t'); i >= 0 {
		interp, arg = interp[:i], interp[i+1:]+" "+arg
	}
	return interp, strings.Trim(arg, " \t"), true
}

// envProgram returns the program `#!/usr/bin/env [-S] prog` runs, or ""
// when interp is not env.
func envProgram(interp, arg string) string {
	if path.Base(interp) != "env" {
		return ""
	}
	for _, w := range strings.Fields(arg) {
		switch {
		case w == "-S" || w == "--split-string":
			continue
		case strings.HasPrefix(w, "-"):
			return "" // other env options: too varied to follow
		case strings.Contains(w, "="):
			continue // NAME=value
		default:
			return w
		}
	}
	return ""
}

// elfLoader returns the PT_INTERP of an ELF file ("" for a static one),
// and whether the file is ELF at all.
func elfLoader(file string) (loader string, isELF bool) {
	// debug/elf reads what the file says; a malformed tool must not take
	// the supervisor down with it.
	defer func() {
		if recover() != nil {
			loader, isELF = "", false
		}
	}()
	osf, err := openRegular(file)
	if err != nil {
		return "", false
	}
	defer osf.Close()
	f, err := elf.NewFile(osf)
	if err != nil {
		return "", false
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP || p.Filesz > 4096 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err == nil {
			return strings.TrimRight(string(b), "\x00"), true
		}
	}
	return "", true
}

// executableIn reports whether file (an inside path) is a regular
// executable file of the host, or of the environment's root.
func executableIn(root, file string) bool {
	_, _, err := (&hostFS{root: root}).LookTool(file)
	return err == nil
}

// realPath resolves the symlinks in file, on the host or within the
// environment's root, and returns the real file to read.
func realPath(root, file string) (string, error) {
	_, real, err := (&hostFS{root: root}).LookTool(file)
	return real, err
}

// toolOnPath reports whether a bare name is a tool the sandbox's PATH finds.
func toolOnPath(pl *plan.Plan, name string) bool {
	if strings.Contains(name, "/") {
		return runnableInside(pl, name, false)
	}
	for _, d := range strings.Split(plan.SandboxPath, ":") {
		if runnableInside(pl, d+"/"+name, false) {
			return true
		}
	}
	return false
}

// runnableInside reports whether the sandbox's kernel, resolving p, reaches
// a file it may execute: a tool's bind, or (for a dynamic loader, which
// Landlock lets the base's libraries provide) a file inside an exec bind
// of the system base.
func runnableInside(pl *plan.Plan, p string, loader bool) bool {
	final, m := resolveInside(pl, p)
	if m == nil || m.Kind != plan.KindBind || !m.Exec {
		return false
	}
	if m.Target == final {
		return m.Origin == plan.OriginTool || m.Origin == plan.OriginCommand || loader
	}
	return loader && m.Origin == plan.OriginBase
}

// resolveInside follows p the way the sandbox's kernel would: through the
// plan's symlinks (/bin -> usr/bin) and, inside folders bound from the
// host, through the host's own symlinks. It returns the final path and the
// deepest mount that holds it; nil when none does or a component is
// missing.
func resolveInside(pl *plan.Plan, p string) (string, *plan.Mount) {
	p = path.Clean(p)
outer:
	for hops := 0; hops < 40; hops++ {
		m := mountOf(pl, p)
		if m == nil {
			return p, nil
		}
		rest := strings.TrimPrefix(strings.TrimPrefix(p, m.Target), "/")
		switch m.Kind {
		case plan.KindSymlink:
			link := m.Source
			if !strings.HasPrefix(link, "/") {
				link = path.Join(path.Dir(m.Target), link)
			}
			p = path.Join(link, rest)
			continue
		case plan.KindBind:
			if rest == "" {
				return p, m
			}
			host, inside := m.Source, m.Target
			comps := strings.Split(rest, "/")
			for i, c := range comps {
				host, inside = path.Join(host, c), path.Join(inside, c)
				fi, err := os.Lstat(host)
				if err != nil {
					return p, nil
				}
				if fi.Mode()&fs.ModeSymlink == 0 {
					continue
				}
				link, err := os.Readlink(host)
				if err != nil {
					return p, nil
				}
				if !strings.HasPrefix(link, "/") {
					link = path.Join(path.Dir(inside), link)
				}
				p = path.Join(append([]string{link}, comps[i+1:]...)...)
				continue outer
			}
			return p, m
		default:
			return p, m
		}
	}
	return p, nil
}

// mountOf returns the deepest mount whose target is p or holds p; of two
// at the same target, the later one (it is mounted over the other).
func mountOf(pl *plan.Plan, p string) *plan.Mount {
	var best *plan.Mount
	for i := range pl.Mounts {
		m := &pl.Mounts[i]
		if m.Target != p && !strings.HasPrefix(p, strings.TrimSuffix(m.Target, "/")+"/") {
			continue
		}
		if best == nil || len(m.Target) >= len(best.Target) {
			best = m
		}
	}
	return best
}
