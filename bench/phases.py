#!/usr/bin/env python3
"""Reads the trace bench/phases records and prints the cold path's steps:
for each, its median and minimum time since the CLI's exec, and the
median time since the step before, over every run."""
import re
import statistics
import sys

LINE = re.compile(r'\s*(\S+)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)')

# Steps no probe marks: (event, test on (comm, pid is the CLI's, rest), name).
KERNEL = [
    ('syscalls:sys_enter_clone3', lambda c, cli, r: cli, 'clone3 (namespaces, cgroup)'),
    ('sched:sched_process_exec', lambda c, cli, r: 'fd/5' in r, 'init exec'),
    ('syscalls:sys_enter_mount', lambda c, cli, r: not cli, 'init: first mount'),
    ('syscalls:sys_enter_pivot_root', lambda c, cli, r: True, 'init: pivot_root'),
    ('syscalls:sys_enter_landlock_restrict_self', lambda c, cli, r: True, 'init: landlock'),
    ('syscalls:sys_enter_seccomp', lambda c, cli, r: True, 'init: seccomp'),
    ('sched:sched_process_exec', lambda c, cli, r: r.startswith('filename=/usr/bin/true') or r.startswith('filename=/bin/true'), 'command exec'),
    ('sched:sched_process_exit', lambda c, cli, r: c == 'true', 'command exit'),
    # The init runs as /proc/self/fd/5, so its comm is "5".
    ('sched:sched_process_exit', lambda c, cli, r: c == '5', 'init dies'),
    ('syscalls:sys_exit_waitid', lambda c, cli, r: cli, 'init reaped'),
    ('syscalls:sys_enter_unlinkat', lambda c, cli, r: cli, 'cgroup rmdir'),
]


def main():
    path, cli_path = sys.argv[1], sys.argv[2]
    runs, cur = [], None
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, _tid, t, ev, rest = m.groups()
        t = float(t) * 1000
        if ev == 'sched:sched_process_exec' and rest.split(' ')[0] == 'filename=' + cli_path:
            cur = {'pid': pid, 'start': t, 'steps': {}}
            runs.append(cur)
            continue
        if cur is None:
            continue
        cli = pid == cur['pid']
        steps = cur['steps']
        name = None
        if ev.startswith('airlockphase:'):
            name = ev.split(':', 1)[1]
        elif ev == 'sched:sched_process_exit' and cli and 'group_dead=true' in rest:
            name = 'CLI exits'
        else:
            for kev, test, kname in KERNEL:
                if ev == kev and kname not in steps and test(comm, cli, rest):
                    if kname == 'init reaped' and 'command exit' not in steps:
                        continue
                    name = kname
                    break
        if name and name not in steps:
            steps[name] = t - cur['start']
    runs = [r for r in runs if 'CLI exits' in r['steps']]
    if not runs:
        sys.exit('bench/phases: no complete run in the trace')
    names = {}
    for r in runs:
        for name, t in r['steps'].items():
            names.setdefault(name, []).append(t)
    order = sorted(names, key=lambda k: statistics.median(names[k]))
    print('%d runs of `airlock run -- /bin/true`; ms since the CLI\'s exec\n' % len(runs))
    print('| step | median | min | median since the step before |')
    print('|---|--:|--:|--:|')
    prev = None
    for name in order:
        med = statistics.median(names[name])
        since = ''
        if prev is not None:
            gaps = [r['steps'][name] - r['steps'][prev] for r in runs if name in r['steps'] and prev in r['steps']]
            if gaps:
                since = '%.2f' % statistics.median(gaps)
        print('| %s | %.2f | %.2f | %s |' % (name, med, min(names[name]), since))
        prev = name


if __name__ == '__main__':
    main()
