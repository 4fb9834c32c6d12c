// drive.mjs drives `airlock mcp` with the official TypeScript MCP SDK client
// (@modelcontextprotocol/sdk, pinned in package-lock.json), over stdio and
// over streamable HTTP, and checks issue 18's acceptance:
//   (a) the tools are listed with their annotations;
//   (b) a 70 s command completes under the SDK's default 60 s request
//       timeout, because the server sends progress notifications (with the
//       output so far) and the client resets its timeout on each; the same
//       command without a progress token, alongside, times out (the control);
//   (c) a denial comes back as structured content;
//   (d) a session survives 2 minutes of idle, then use, and ends at its
//       lifetime with the documented "session has ended" result.
// The stdio and HTTP scenarios, and (b) and (d), run concurrently.
//
// e2e/mcpts_test.go runs it as `node drive.mjs` next to an installed
// node_modules, with AIRLOCK_BIN naming the airlock binary under test (which
// runs the airlock-server next to it for `airlock mcp`). It prints one
// line per check ("ok ..." or "FAIL ..."), exits 1 if any failed, and kills
// every server it started on every path, within MCPTS_TIMEOUT_SECONDS.
//
// Knobs for a quick local run (the defaults are the acceptance's):
// MCPTS_LONG_SECONDS (70), MCPTS_IDLE_SECONDS (120), MCPTS_LIFETIME_SECONDS
// (150), MCPTS_TIMEOUT_SECONDS (330).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

const BIN = process.env.AIRLOCK_BIN;
if (!BIN) {
  console.error('drive.mjs: AIRLOCK_BIN is not set: set it to the airlock binary under test');
  process.exit(2);
}
const num = (name, def) => {
  const v = process.env[name];
  if (v === undefined || v === '') return def;
  const n = Number(v);
  if (!(n > 0)) {
    console.error(`drive.mjs: ${name}=${v} is not a positive number of seconds: unset it or give one`);
    process.exit(2);
  }
  return n;
};
const LONG_S = num('MCPTS_LONG_SECONDS', 70);
const IDLE_S = num('MCPTS_IDLE_SECONDS', 120);
const LIFETIME_S = num('MCPTS_LIFETIME_SECONDS', 150);
const TIMEOUT_S = num('MCPTS_TIMEOUT_SECONDS', 330);
const TICK_S = 5; // the long command prints a line every TICK_S seconds
const TICKS = Math.ceil(LONG_S / TICK_S);

const t0 = Date.now();
const stamp = () => `${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s`;
const log = (line) => console.log(`${stamp()} ${line}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const short = (v, n = 600) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > n ? s.slice(0, n) + `... (${s.length} chars)` : s;
};

// ---- cleanup: every process and directory this script made ----

const pids = new Set(); // airlock servers started, directly or by the SDK
const dirs = new Set();
const serverLogs = new Map(); // name -> stderr text

function killAll() {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  pids.clear();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs.clear();
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`FAIL drive.mjs: got ${sig}: killing the servers`);
    process.exit(1);
  });
}
setTimeout(() => {
  log(`FAIL drive.mjs: not done after ${TIMEOUT_S}s: killing the servers`);
  dumpServerLogs();
  process.exit(1);
}, TIMEOUT_S * 1000).unref();

function dumpServerLogs() {
  for (const [name, text] of serverLogs) {
    console.log(`---- ${name} server stderr (last 4000 chars) ----\n${text.slice(-4000)}`);
  }
}

function tempDir(tag) {
  const d = mkdtempSync(join(tmpdir(), `airlock-mcpts-${tag}-`));
  dirs.add(d);
  return d;
}

function collect(name, stream) {
  serverLogs.set(name, '');
  stream.setEncoding('utf8');
  stream.on('data', (s) => {
    const prev = serverLogs.get(name);
    serverLogs.set(name, (prev + s).slice(-64 << 10));
  });
}

// ---- checks ----

let failures = 0;
async function check(scope, name, fn) {
  try {
    const detail = await fn();
    log(`ok   ${scope} ${name}${detail ? ': ' + detail : ''}`);
    return true;
  } catch (e) {
    failures++;
    log(`FAIL ${scope} ${name}: ${e && e.stack ? e.stack : e}`);
    return false;
  }
}

// policyArgs is one policy for every server: a workspace, the tools the
// checks run, max_wall above the long command, and the session lifetime
// of (d).
function policyArgs(ws) {
  return ['--fs-write', ws, '--tool', 'sh', '--tool', 'sleep', '--tool', 'cat',
    '--max-wall', `${LONG_S + 50}s`, '--session-lifetime', `${LIFETIME_S}s`];
}

function newClient(name) {
  return new Client({ name: `airlock-e2e-${name}`, version: '1.0.0' });
}

// connectStdio starts `airlock mcp` through the SDK's stdio transport.
async function connectStdio(name) {
  const ws = tempDir(name);
  const transport = new StdioClientTransport({ command: BIN, args: ['mcp', ...policyArgs(ws)], stderr: 'pipe' });
  collect(name, transport.stderr);
  const client = newClient(name);
  await client.connect(transport);
  if (transport.pid) pids.add(transport.pid);
  const close = async () => {
    const pid = transport.pid;
    await client.close(); // ends stdin; the SDK waits, then SIGTERM, then SIGKILL
    pids.delete(pid);
  };
  return { client, ws, close };
}

// startHTTP starts `airlock mcp --listen 127.0.0.1:0` with a bearer token
// and returns its URL once it says where it listens.
async function startHTTP(name) {
  const ws = tempDir(name);
  const token = randomBytes(24).toString('base64url');
  const args = ['mcp', ...policyArgs(ws), '--idle', `${IDLE_S + 60}s`, '--listen', '127.0.0.1:0'];
  const child = spawn(BIN, args, { env: { ...process.env, AIRLOCK_TOKEN: token }, stdio: ['ignore', 'ignore', 'pipe'] });
  pids.add(child.pid);
  collect(name, child.stderr);
  const exited = new Promise((resolve) => child.once('exit', (code, sig) => resolve({ code, sig })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('airlock mcp --listen did not say where it serves within 30s')), 30000);
    const poll = setInterval(() => {
      const m = /serving MCP \(streamable HTTP\) on (http:\/\/\S+)/.exec(serverLogs.get(name));
      if (m) {
        clearInterval(poll);
        clearTimeout(timer);
        resolve(m[1]);
      }
    }, 50);
    exited.then(({ code, sig }) => {
      clearInterval(poll);
      clearTimeout(timer);
      reject(new Error(`airlock mcp --listen exited (code ${code}, signal ${sig}) before serving`));
    });
  });
  const stop = async () => {
    child.kill('SIGTERM');
    const r = await Promise.race([exited, sleep(15000).then(() => null)]);
    pids.delete(child.pid);
    if (r === null) {
      child.kill('SIGKILL');
      throw new Error('airlock mcp --listen did not exit within 15s of SIGTERM');
    }
    if (r.code !== 0) throw new Error(`airlock mcp --listen exited with code ${r.code}, signal ${r.sig} after SIGTERM`);
  };
  return { url, token, ws, stop };
}

async function connectHTTP(server, name) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
  });
  const client = newClient(name);
  await client.connect(transport);
  const close = async () => {
    await transport.terminateSession(); // DELETE: the server closes this session's sandbox
    await client.close();
  };
  return { client, ws: server.ws, close };
}

// ---- (a) tools and annotations ----

// wantTools is what airlock sets in mcp/tools.go (addTools); the policy
// grants no net_hosts, so run's openWorldHint is false.
const wantTools = {
  run: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  read_file: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  write_file: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  list_files: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  session_info: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  extend_session: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
};

async function checkTools(scope, client) {
  await check(scope, '(a) tools listed with annotations', async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(byName).sort(), Object.keys(wantTools).sort(), 'tool names');
    const parts = [];
    for (const [name, want] of Object.entries(wantTools)) {
      const a = byName[name].annotations;
      assert.ok(a, `${name}: no annotations`);
      assert.ok(typeof a.title === 'string' && a.title !== '', `${name}: no title in annotations`);
      for (const [k, v] of Object.entries(want)) {
        assert.equal(a[k] ?? false, v, `${name}: annotations.${k} = ${a[k]}, want ${v}`);
      }
      assert.ok(byName[name].outputSchema, `${name}: no outputSchema`);
      parts.push(`${name}{${Object.keys(want).map((k) => `${k.replace('Hint', '')}=${a[k]}`).join(',')}}`);
    }
    const cmd = byName.run.inputSchema.properties.command;
    assert.equal(cmd.type, 'array', `run's command schema is ${JSON.stringify(cmd)}, want an array`);
    assert.equal(cmd.items?.type, 'string', `run's command items are ${JSON.stringify(cmd.items)}, want strings`);
    return parts.join(' ');
  });
}

// ---- (c) denials as structured content ----

function assertDenial(d, rule, what) {
  assert.ok(d, `${what}: no denied in structuredContent`);
  for (const f of ['layer', 'op', 'target', 'rule', 'message']) {
    assert.ok(typeof d[f] === 'string' && d[f] !== '', `${what}: denied.${f} is ${JSON.stringify(d[f])}`);
  }
  assert.equal(d.rule, rule, `${what}: denied.rule`);
}

async function checkDenials(scope, client) {
  await check(scope, '(c) read_file /etc/shadow denied as structured content', async () => {
    const res = await client.callTool({ name: 'read_file', arguments: { path: '/etc/shadow' } });
    assert.equal(res.isError, true, `isError is ${res.isError}`);
    const sc = res.structuredContent;
    assert.ok(sc, `no structuredContent: ${short(res)}`);
    assertDenial(sc.denied, 'fs_read', 'read_file /etc/shadow');
    assert.equal(sc.denied.target, '/etc/shadow');
    assert.equal(sc.content, undefined, 'content came back with the denial');
    assert.equal(sc.operator, undefined, 'operator advice reached the agent without --agent-advice');
    assert.match(res.content?.[0]?.text ?? '', /denied/, 'text content does not say denied');
    return `isError=${res.isError} structuredContent=${JSON.stringify(sc)} text=${JSON.stringify(res.content[0].text)}`;
  });
  await check(scope, '(c) run of a tool outside allowed_tools denied as structured content', async () => {
    const res = await client.callTool({ name: 'run', arguments: { command: ['curl', 'https://example.com'] } });
    assert.equal(res.isError, true, `isError is ${res.isError}`);
    const sc = res.structuredContent;
    assert.ok(sc, `no structuredContent: ${short(res)}`);
    assertDenial(sc.denied, 'allowed_tools', 'run curl');
    assert.equal(sc.exit_code, 127, 'exit_code');
    assert.equal(sc.denials?.length, 1, 'denials');
    assert.equal(sc.denials[0].rule, 'allowed_tools');
    assert.equal(sc.denial_counts?.total, 1, 'denial_counts.total');
    assert.equal(sc.operator, undefined, 'operator advice reached the agent without --agent-advice');
    return `isError=${res.isError} structuredContent=${JSON.stringify(sc)}`;
  });
}

// ---- (b) a long command with progress ----

async function checkLongRun(scope, client) {
  await check(scope, `(b) a ${LONG_S}s command completes with progress (SDK request timeout ${DEFAULT_REQUEST_TIMEOUT_MSEC / 1000}s, resetTimeoutOnProgress)`, async () => {
    const notes = [];
    const script = `i=1; while [ $i -le ${TICKS} ]; do echo tick $i; sleep ${TICK_S}; i=$((i+1)); done; echo done`;
    const start = Date.now();
    const res = await client.callTool({ name: 'run', arguments: { command: ['sh', '-c', script] } }, undefined, {
      onprogress: (p) => notes.push({ at: (Date.now() - start) / 1000, ...p }),
      resetTimeoutOnProgress: true, // no timeout given: the SDK's default applies
    });
    const took = (Date.now() - start) / 1000;
    const sc = res.structuredContent;
    assert.ok(sc, `no structuredContent: ${short(res)}`);
    assert.equal(res.isError ?? false, false, `isError: ${short(res)}`);
    assert.equal(sc.exit_code, 0, `exit_code: ${short(sc)}`);
    assert.equal(sc.halted_by ?? null, null, `halted_by: ${sc.halted_by}`);
    let want = '';
    for (let i = 1; i <= TICKS; i++) want += `tick ${i}\n`;
    assert.equal(sc.stdout, want + 'done\n', 'stdout is not the full output');
    if (LONG_S >= 70) {
      assert.ok(took * 1000 > DEFAULT_REQUEST_TIMEOUT_MSEC, `the run took ${took}s, not past the SDK's ${DEFAULT_REQUEST_TIMEOUT_MSEC / 1000}s timeout`);
    }
    const minNotes = Math.max(2, Math.floor(LONG_S / 5 / 2)); // the default interval is 5s
    assert.ok(notes.length >= minNotes, `${notes.length} progress notifications, want at least ${minNotes}`);
    for (let i = 1; i < notes.length; i++) {
      assert.ok(notes[i].progress > notes[i - 1].progress, `progress went from ${notes[i - 1].progress} to ${notes[i].progress}`);
    }
    const withOutput = notes.filter((n) => /bytes of output so far; latest:\n(.|\n)*tick \d+/.test(n.message ?? ''));
    assert.ok(withOutput.length >= minNotes - 1, `only ${withOutput.length} of ${notes.length} progress messages carry the output so far: ${short(notes)}`);
    const last = notes[notes.length - 1];
    assert.match(last.message, new RegExp(`tick ${TICKS - 1}\\b`), 'the last progress message lacks the latest output');
    const gaps = notes.map((n, i) => n.at - (i ? notes[i - 1].at : 0));
    return `took ${took.toFixed(1)}s, exit 0, stdout ${sc.stdout.length} bytes in full; ${notes.length} progress notifications ` +
      `(${withOutput.length} with output, max gap ${Math.max(...gaps).toFixed(1)}s, progress ${notes[0].progress}..${last.progress}); ` +
      `first ${JSON.stringify(notes[0].message)}; last ${JSON.stringify(last.message)}`;
  });
}

// checkNoProgressTimesOut is (b)'s control, run alongside it: the same
// command without a progress token gets the SDK's request timeout, so (b)
// passes because of the progress notifications.
async function checkNoProgressTimesOut(scope, client) {
  if (LONG_S * 1000 <= DEFAULT_REQUEST_TIMEOUT_MSEC) return;
  await check(scope, `(b) control: the same command without progress times out at ${DEFAULT_REQUEST_TIMEOUT_MSEC / 1000}s`, async () => {
    const start = Date.now();
    const script = `i=1; while [ $i -le ${TICKS} ]; do echo tick $i; sleep ${TICK_S}; i=$((i+1)); done`;
    const err = await client.callTool({ name: 'run', arguments: { command: ['sh', '-c', script] } }, undefined, { resetTimeoutOnProgress: true })
      .then((res) => new Error(`it completed: ${short(res)}`), (e) => e);
    const took = (Date.now() - start) / 1000;
    assert.ok(err instanceof McpError, `got ${err}`);
    assert.equal(err.code, ErrorCode.RequestTimeout, `error code: ${err.message}`);
    return `McpError ${err.code} "${err.message}" after ${took.toFixed(1)}s`;
  });
}

// ---- (d) idle, then use, then the lifetime ----

async function checkLifetime(scope, client) {
  let startedID = '';
  let deadline = 0;
  const marker = `written before the idle ${randomBytes(6).toString('hex')}\n`;
  const ok = await check(scope, '(d) a first call starts the sandbox', async () => {
    const w = await client.callTool({ name: 'write_file', arguments: { path: 'marker.txt', content: marker } });
    assert.equal(w.isError ?? false, false, `write_file: ${short(w)}`);
    const info = await client.callTool({ name: 'session_info', arguments: {} });
    const sc = info.structuredContent;
    assert.equal(sc.started, true, 'session_info started');
    startedID = sc.id;
    deadline = Date.parse(sc.deadline);
    const left = (deadline - Date.now()) / 1000;
    assert.ok(left > IDLE_S && left <= LIFETIME_S + 1, `session ends in ${left}s, want within (${IDLE_S}, ${LIFETIME_S}]`);
    return `sandbox ${startedID}, deadline ${sc.deadline} (in ${left.toFixed(1)}s), seconds_left ${sc.usage?.seconds_left?.toFixed(1)}`;
  });
  if (!ok) return;
  log(`     ${scope} (d) idle for ${IDLE_S}s`);
  await sleep(IDLE_S * 1000);
  const alive = await check(scope, `(d) after ${IDLE_S}s idle the same sandbox answers`, async () => {
    const r = await client.callTool({ name: 'run', arguments: { command: ['cat', 'marker.txt'] } });
    assert.equal(r.isError ?? false, false, `run cat: ${short(r)}`);
    assert.equal(r.structuredContent.exit_code, 0);
    assert.equal(r.structuredContent.stdout, marker, 'the file written before the idle');
    const info = await client.callTool({ name: 'session_info', arguments: {} });
    assert.equal(info.structuredContent.id, startedID, 'session_info id changed: a new sandbox');
    return `run cat marker.txt -> ${JSON.stringify(r.structuredContent.stdout)}, sandbox ${info.structuredContent.id}, seconds_left ${info.structuredContent.usage?.seconds_left?.toFixed(1)}`;
  });
  if (!alive) return;
  const wait = deadline - Date.now() + 3000;
  log(`     ${scope} (d) waiting ${(wait / 1000).toFixed(1)}s for the session's lifetime to pass`);
  await sleep(Math.max(wait, 0));
  await check(scope, '(d) after its lifetime run gets the session-ended result', async () => {
    const r = await client.callTool({ name: 'run', arguments: { command: ['cat', 'marker.txt'] } });
    const text = r.content?.[0]?.text ?? '';
    assert.equal(r.isError, true, `run after the lifetime: ${short(r)}`);
    assert.match(text, /the session has ended/, 'the text');
    const d = r.structuredContent?.denied;
    assert.equal(d?.layer, 'budget', `structured denial: ${short(r)}`);
    assert.equal(d?.rule, 'session_lifetime', 'the denial names why the session ended');
    assert.match(d?.hint ?? '', /new MCP session/, 'the hint says what to do');
    assert.ok(!r.structuredContent?.stdout, 'the run produced output after the lifetime');
    return `isError=${r.isError} text=${JSON.stringify(text)} structuredContent=${JSON.stringify(r.structuredContent ?? null)}`;
  });
  await check(scope, '(d) after its lifetime read_file is refused', async () => {
    const r = await client.callTool({ name: 'read_file', arguments: { path: 'marker.txt' } });
    assert.equal(r.isError, true, `read_file after the lifetime: ${short(r)}`);
    assert.equal(r.structuredContent?.content, undefined, 'read_file returned the content after the lifetime');
    assert.equal(r.structuredContent?.denied?.rule, 'session_lifetime', `the same structured denial as run: ${short(r)}`);
    assert.match(r.structuredContent?.denied?.hint ?? '', /new MCP session/, 'the hint says what to do');
    return `isError=${r.isError} text=${JSON.stringify(r.content?.[0]?.text)} structuredContent=${JSON.stringify(r.structuredContent ?? null)}`;
  });
  await check(scope, '(d) after its lifetime session_info says the session is over', async () => {
    const r = await client.callTool({ name: 'session_info', arguments: {} });
    const u = r.structuredContent?.usage;
    assert.ok(u, `no usage: ${short(r)}`);
    assert.equal(u.seconds_left, 0, 'seconds_left');
    return `usage.seconds_left=${u.seconds_left} halted_by=${JSON.stringify(u.halted_by)}`;
  });
}

// ---- scenarios ----

async function scenario(scope, connect, body) {
  let conn;
  const connected = await check(scope, 'connect', async () => {
    conn = await connect();
    const v = conn.client.getServerVersion();
    return `server ${v?.name} ${v?.version}`;
  });
  if (!connected) return;
  try {
    await body(conn.client);
  } finally {
    await check(scope, 'close', async () => conn.close());
  }
}

async function main() {
  log(`airlock ${BIN}; long run ${LONG_S}s, idle ${IDLE_S}s, lifetime ${LIFETIME_S}s`);
  const basic = (client, scope) => (async () => {
    await checkTools(scope, client);
    await checkDenials(scope, client);
    await Promise.all([checkLongRun(scope, client), checkNoProgressTimesOut(scope, client)]);
  })();
  let http;
  const httpUp = await check('http', 'start airlock mcp --listen', async () => {
    http = await startHTTP('http');
    return http.url;
  });
  const runs = [
    scenario('stdio', () => connectStdio('stdio'), (c) => basic(c, 'stdio')),
    scenario('stdio-lifetime', () => connectStdio('stdio-lifetime'), (c) => checkLifetime('stdio-lifetime', c)),
  ];
  if (httpUp) {
    runs.push(
      scenario('http', () => connectHTTP(http, 'http'), (c) => basic(c, 'http')),
      scenario('http-lifetime', () => connectHTTP(http, 'http-lifetime'), (c) => checkLifetime('http-lifetime', c)),
    );
  }
  await Promise.all(runs);
  if (httpUp) await check('http', 'stop airlock mcp --listen (SIGTERM, exit 0)', async () => http.stop());
  if (failures > 0) {
    dumpServerLogs();
    log(`FAIL ${failures} check(s) failed`);
    process.exit(1);
  }
  log('PASS every check');
  process.exit(0);
}

main().catch((e) => {
  log(`FAIL drive.mjs: ${e && e.stack ? e.stack : e}`);
  dumpServerLogs();
  process.exit(1);
});
