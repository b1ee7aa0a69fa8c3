// auditd's status page: polls the JSON API, follows /v1/alerts/stream, and
// verifies entries in the browser (verify.js).
import * as v from './verify.js';

const $ = (sel) => document.querySelector(sel);
const state = { token: sessionStorage.getItem('auditd-token') || '', sizes: new Map(), cps: new Map(), alerts: new Map() };

class HTTPError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path, { text = false, signal } = {}) {
  const headers = {};
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  const r = await fetch(path, { headers, signal, cache: 'no-store' });
  if (r.status === 401) { askToken(); throw new HTTPError(401, 'the server protects reads: give the read token'); }
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { const e = await r.json(); msg = `${r.status} ${e.code}: ${e.error}`; } catch { /* not JSON */ }
    throw new HTTPError(r.status, msg);
  }
  return text ? r.text() : r.json();
}

function askToken() {
  $('#token-form').hidden = false;
  setConn('token needed', 'bad');
  // Nothing is known of the alerts until the token is given: never "none firing".
  if (!state.alertsKnown) $('#alerts').replaceChildren(el('li', { class: 'muted', 'data-unknown': 'token' }, 'unknown: token needed'));
}

function setConn(text, cls) {
  const c = $('#conn');
  c.textContent = text;
  c.className = 'badge ' + (cls || '');
}

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, val] of Object.entries(attrs)) {
    if (k === 'class') e.className = val; else e.setAttribute(k, val);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function ago(t) {
  if (!t) return '-';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(t)) / 1000));
  if (s < 120) return s + 's ago';
  if (s < 7200) return Math.round(s / 60) + 'm ago';
  return Math.round(s / 3600) + 'h ago';
}

function fill(table, rows) {
  const body = $(table + ' tbody');
  body.replaceChildren(...rows);
  if (rows.length === 0) body.append(el('tr', {}, el('td', { class: 'muted', colspan: '7' }, 'none')));
}

const maxLogDetails = 50; // logs whose own GET (checkpoint, Kafka lag) is read each poll

async function refreshLogs() {
  const logs = await api('/v1/logs');
  const now = performance.now();
  const details = await Promise.all(logs.slice(0, maxLogDetails).map((l) => api('/v1/logs/' + encodeURIComponent(l.name) + '/').catch(() => null)));
  const rows = logs.map((l, i) => {
    const d = details[i];
    const prev = state.sizes.get(l.name);
    let rate = '-';
    if (prev && now > prev.at) rate = ((l.size - prev.size) / ((now - prev.at) / 1000)).toFixed(1);
    state.sizes.set(l.name, { size: l.size, at: now });
    let cp = '-', lag = '-', wit = '-', st = 'ok';
    if (d) {
      // A checkpoint carries no time: its age is when this page saw it grow.
      const seen = state.cps.get(l.name);
      const cpSize = d.checkpoint ? d.checkpoint.size : -1;
      if (!seen || seen.size !== cpSize) state.cps.set(l.name, { size: cpSize, at: seen ? new Date().toISOString() : null });
      const grew = state.cps.get(l.name).at;
      cp = d.checkpoint ? String(d.checkpoint.size) + (d.checkpoint.size < d.size ? ' (behind)' : '') +
        (grew ? ', grew ' + ago(grew) : ', unchanged since the page loaded') : 'none';
      if (d.source && d.source.lag >= 0) lag = String(d.source.lag);
      // Witnesses (docs/witness.md): what each cosigned, how far behind it is, its last error.
      if (d.witnesses && d.witnesses.length) {
        wit = d.witnesses.map((w) => w.witness + ': ' + (w.cosigned_size == null ? 'none' : w.cosigned_size) +
          (w.lag > 0 ? ' (lag ' + w.lag + ')' : '') + (w.last_error ? ' [' + w.last_error + ']' : '')).join('; ');
      }
      if (d.error) st = 'error: ' + d.error; else if (d.read_only) st = 'read-only';
    }
    return el('tr', { 'data-log': l.name }, el('td', {}, l.name), el('td', {}, l.size), el('td', {}, cp), el('td', {}, rate), el('td', {}, lag), el('td', {}, wit),
      el('td', { class: st === 'ok' ? 'state-ok' : 'state-error' }, st));
  });
  fill('#logs', rows);
}

async function refreshSection(path, field, table, row) {
  try {
    const out = await api(path);
    fill(table, (out[field] || []).map(row));
  } catch (e) {
    if (e.status === 404) fill(table, [el('tr', {}, el('td', { class: 'muted', colspan: '6' }, 'not configured on this server'))]);
    else throw e;
  }
}

const derivationRow = (d) => el('tr', { 'data-derivation': d.name }, el('td', {}, d.name), el('td', {}, d.store),
  el('td', { class: 'state-' + (d.last_state || 'none'), title: d.waiting || '' }, (d.last_state || 'not run yet') +
    (d.last_state === 'no_source' && d.waiting ? ': ' + d.waiting : '') + (d.running ? ' (running)' : '')),
  el('td', {}, ago(d.last_run_at)), el('td', {}, d.confirmed), el('td', {}, d.pending),
  el('td', { class: d.skipped_events ? 'state-error' : '' }, d.skipped_events || 0));

const checkRow = (c) => el('tr', { 'data-check': c.name }, el('td', {}, c.name), el('td', {}, c.state),
  el('td', { class: 'state-' + (c.last_run ? c.last_run.result : 'none') }, c.last_run ? c.last_run.result : 'never ran'),
  el('td', {}, ago(c.last_success_at)), el('td', {}, (c.findings || []).length));

function duration(sec) {
  sec = Math.floor(sec);
  if (sec < 120) return sec + 's';
  if (sec < 7200) return Math.floor(sec / 60) + 'm';
  if (sec < 172800) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
  return Math.floor(sec / 86400) + 'd ' + Math.floor((sec % 86400) / 3600) + 'h';
}

async function refreshInfo() {
  try {
    const i = await api('/v1/info');
    $('#info').textContent = `${i.version}${i.dirty ? ' (dirty)' : ''} · origin ${i.origin} · up ${duration(i.uptime_seconds)}`;
    $('#info').title = `revision ${i.revision}, ${i.go_version}, started ${i.started_at}`;
  } catch (e) {
    if (e.status === 404) $('#info').textContent = ''; else throw e;
  }
}

// ---- charts: the daemon's own recent history (GET /v1/history) ----

const svgNS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, val] of Object.entries(attrs)) e.setAttribute(k, val);
  return e;
}

// chart draws one small line chart of points [t, y] (t in ms).
function chart(title, points, unit, attrs) {
  points = points.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1])); // one NaN would blank the line
  const w = 260, h = 60;
  const box = el('figure', Object.assign({ class: 'chart' }, attrs));
  const max = Math.max(1, ...points.map((p) => p[1]));
  const t0 = points.length ? points[0][0] : 0, t1 = points.length ? points[points.length - 1][0] : 1;
  const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * (w - 2) + 1 : w - 1);
  const y = (v) => h - 2 - (v / max) * (h - 6);
  const s = svg('svg', { viewBox: `0 0 ${w} ${h}`, width: '100%', height: h, role: 'img', 'aria-label': title });
  s.append(svg('line', { x1: 0, y1: h - 1, x2: w, y2: h - 1, class: 'axis' }));
  if (points.length > 1) s.append(svg('polyline', { points: points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' '), class: 'line' }));
  const last = points.length ? points[points.length - 1][1] : null;
  box.append(el('figcaption', {}, title + ': ', el('strong', {}, last == null ? '-' : (Math.round(last * 10) / 10) + unit),
    el('span', { class: 'muted' }, ' (max ' + (Math.round(max * 10) / 10) + unit + ')')), s);
  return box;
}

async function refreshCharts() {
  // The history gains a sample every interval_seconds: fetching it on every
  // 3s poll would resend up to 360 samples of 50 logs for nothing new.
  if (state.histNext && Date.now() < state.histNext) return;
  let hist;
  try { hist = await api('/v1/history'); } catch (e) { if (e.status === 404) { $('#charts-section').hidden = true; return; } throw e; }
  state.histNext = Date.now() + hist.interval_seconds * 1000;
  const ss = hist.samples || [];
  $('#charts-note').textContent = ss.length ? `(the last ${duration((Date.parse(ss[ss.length - 1].at) - Date.parse(ss[0].at)) / 1000)}, a sample every ${hist.interval_seconds}s)` : '(no samples yet)';
  const logs = new Set(), derivs = new Set();
  for (const smp of ss) { Object.keys(smp.logs || {}).forEach((l) => logs.add(l)); Object.keys(smp.drift_keys || {}).forEach((d) => derivs.add(d)); }
  const figs = [];
  for (const l of [...logs].sort()) {
    const rate = [], age = [];
    for (let i = 0; i < ss.length; i++) {
      const cur = ss[i].logs[l];
      if (!cur) continue;
      const t = Date.parse(ss[i].at);
      age.push([t, cur.checkpoint_age_seconds]);
      const prev = i > 0 && ss[i - 1].logs[l];
      // Two samples can fall in one millisecond (a ticker that fires twice
      // after a stall): no rate over no time.
      const dt = prev ? (t - Date.parse(ss[i - 1].at)) / 1000 : 0;
      if (dt > 0) rate.push([t, Math.max(0, (cur.size - prev.size) / dt)]);
    }
    figs.push(chart(l + ' entries/s', rate, '/s', { 'data-chart': 'rate', 'data-log': l }),
      chart(l + ' checkpoint age', age, 's', { 'data-chart': 'checkpoint-age', 'data-log': l }));
  }
  for (const d of [...derivs].sort()) {
    figs.push(chart(d + ' drifted keys', ss.filter((x) => x.drift_keys && d in x.drift_keys).map((x) => [Date.parse(x.at), x.drift_keys[d]]), '',
      { 'data-chart': 'drift', 'data-derivation': d }));
  }
  $('#charts').replaceChildren(...figs);
}

// ---- drift evidence: the latest run's drifted keys and their lineage ----

const show = (v) => (v === undefined ? '(none)' : typeof v === 'string' ? v : JSON.stringify(v));

async function refreshDrift(derivs) {
  const drifted = derivs.filter((d) => d.last_state === 'drift' || d.confirmed > 0 || d.pending > 0);
  $('#drift-section').hidden = drifted.length === 0;
  const blocks = await Promise.all(drifted.map(async (d) => {
    let rep;
    try { rep = await api('/v1/derivations/' + encodeURIComponent(d.name) + '/runs/latest'); } catch { return null; }
    const rows = (rep.drift || []).map((k) => {
      const lineage = el('ol', { class: 'lineage' }, ...(k.lineage || []).map((ev) => el('li', { 'data-log': ev.log, 'data-index': ev.index },
        `${ev.log} #${ev.index} (${ev.id}, ${ev.time})${ev.why ? ' — ' + ev.why : ''} `,
        el('button', { type: 'button', class: 'verify-entry', 'data-log': ev.log, 'data-index': ev.index }, 'Verify'))));
      return el('tr', { 'data-key': k.key, 'data-status': k.status },
        el('td', {}, k.key), el('td', {}, k.kind), el('td', { class: 'expected' }, show(k.expected)), el('td', { class: 'actual' }, show(k.actual)),
        el('td', { class: 'state-' + (k.status === 'confirmed' ? 'drift' : 'pending') }, k.status + (k.runs ? ` (${k.runs} runs)` : '')), el('td', {}, lineage));
    });
    return el('div', { id: 'drift-' + d.name, 'data-derivation': d.name },
      el('h3', {}, `${d.name}: ${rep.confirmed} confirmed, ${rep.pending} pending (run ${ago(rep.started_at)}, ${rep.keys} keys)`),
      el('div', { class: 'scroll' }, el('table', { class: 'drift' },
        el('thead', {}, el('tr', {}, ...['key', 'kind', 'expected (ledger)', 'stored', 'status', 'lineage entries'].map((h) => el('th', {}, h)))),
        el('tbody', {}, ...rows))));
  }));
  $('#drift').replaceChildren(...blocks.filter(Boolean));
}

async function refresh() {
  try {
    let derivs = [];
    await Promise.all([refreshLogs(), refreshInfo(), refreshCharts(),
      refreshSection('/v1/derivations', 'derivations', '#derivations', (d) => { derivs.push(d); return derivationRow(d); }),
      refreshSection('/v1/checks', 'checks', '#checks', checkRow)]);
    await refreshDrift(derivs);
    setConn('connected', 'ok');
    $('#footer').textContent = 'updated ' + new Date().toISOString();
  } catch (e) {
    if (e.status !== 401) setConn('error: ' + e.message, 'bad');
  }
}

function renderAlerts() {
  state.alertsKnown = true;
  const list = [...state.alerts.values()].sort((a, b) => (a.state === b.state ? (a.id < b.id ? -1 : 1) : a.state === 'firing' ? -1 : 1));
  const ul = $('#alerts');
  if (list.length === 0) { ul.replaceChildren(el('li', { class: 'muted' }, 'none firing')); return; }
  ul.replaceChildren(...list.map((a) => el('li', { class: a.state, 'data-alert': a.id, 'data-state': a.state },
    el('strong', {}, a.state.toUpperCase()), ' ', a.id, ' — ', a.summary, ' ', el('span', { class: 'muted' }, '(' + ago(a.starts_at) + ')'),
    ...(a.kind === 'drift' && a.subject ? [' ', el('a', { href: '#drift-' + a.subject, class: 'evidence' }, 'evidence')] : []))));
}

// followAlerts reads the SSE stream with fetch (EventSource cannot send the
// token) and reconnects when it ends; the server begins each stream with
// the firing alerts.
async function followAlerts() {
  for (;;) {
    try {
      const headers = { Accept: 'text/event-stream' };
      if (state.token) headers.Authorization = 'Bearer ' + state.token;
      const r = await fetch('/v1/alerts/stream', { headers, cache: 'no-store' });
      if (r.status === 401) { askToken(); await new Promise((res) => { state.tokenSet = res; }); continue; }
      if (r.status === 404) { $('#alerts-live').textContent = '(alerts are not enabled on this server)'; return; }
      if (!r.ok) throw new Error('stream: ' + r.status);
      $('#alerts-live').textContent = '(live)';
      state.alerts.clear();
      renderAlerts();
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i); buf = buf.slice(i + 2);
          const data = ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
          if (data) { const a = JSON.parse(data); state.alerts.set(a.id, a); renderAlerts(); }
        }
      }
    } catch (e) {
      $('#alerts-live').textContent = '(reconnecting: ' + e.message + ')';
    }
    await new Promise((res) => setTimeout(res, 1000));
  }
}

// ---- verification ----

function step(name, title) {
  const li = el('li', { 'data-step': name, class: 'pending' }, el('span', { class: 'title' }, title + ': '), el('span', { class: 'result' }, '…'));
  $('#steps').append(li);
  return {
    pass(detail) { li.className = 'pass'; li.dataset.result = 'pass'; li.querySelector('.result').textContent = 'passed'; if (detail) li.append(el('span', { class: 'detail' }, detail)); },
    fail(err) { li.className = 'fail'; li.dataset.result = 'fail'; li.querySelector('.result').textContent = 'FAILED'; li.append(el('span', { class: 'detail' }, err.message || String(err))); },
  };
}

async function run(name, title, fn) {
  const s = step(name, title);
  try { const out = await fn(); s.pass(out && out.detail); return out; } catch (e) { s.fail(e); throw Object.assign(e, { step: title }); }
}

async function verifyEntry(keyText, log, which) {
  $('#steps').replaceChildren();
  const verdict = $('#verdict');
  verdict.hidden = true;
  const logPath = '/v1/logs/' + encodeURIComponent(log);
  try {
    const vk = await run('key', 'Verifier key', async () => {
      const k = await v.parseVerifierKey(keyText);
      return Object.assign(k, { detail: `${k.name}, key hash ${k.hashHex}` });
    });
    const cp = await run('checkpoint', 'Checkpoint fetched and parsed', async () => {
      const c = v.parseCheckpoint(await api(logPath + '/checkpoint', { text: true }));
      if (!c.origin.endsWith('/' + log)) throw new Error(`origin ${c.origin} is not this log's (want …/${log})`);
      return Object.assign(c, { detail: `origin ${c.origin}, size ${c.size}, root ${v.b64enc(c.root)}` });
    });
    await run('signature', 'Checkpoint signature (Ed25519, WebCrypto)', async () => {
      await v.verifyCheckpoint(cp, vk);
      return { detail: `signed by ${vk.name}` };
    });
    const e = await run('entry', 'Entry fetched', async () => {
      const w = which.trim();
      // "#12" or "12": an index; "id:12" or anything else: an event id.
      const path = /^#?\d+$/.test(w)
        ? logPath + '/entries/' + w.replace('#', '') + '?payload=base64'
        : logPath + '/entries?id=' + encodeURIComponent(w.replace(/^id:/, '')) + '&payload=base64';
      const en = await api(path);
      if (BigInt(en.index) >= cp.size) throw new Error(`entry ${en.index} is not covered by the checkpoint of size ${cp.size} yet; try again in a moment`);
      return Object.assign(en, { detail: `index ${en.index}, id ${en.id}, time ${en.time}` });
    });
    const psha = await run('payload', 'Payload SHA-256', async () => {
      const h = await v.payloadHash(e);
      if (v.b64enc(h) !== e.payload_sha256) throw new Error(`the payload hashes to ${v.b64enc(h)}, the entry says ${e.payload_sha256}`);
      return Object.assign(h, { detail: v.b64enc(h) + (e.payload_pruned ? ' (pruned: as stated by the server)' : '') });
    });
    const lh = await run('leaf', 'Leaf recomputed from the entry (ledger-format v1)', async () => {
      const leaf = v.encodeLeaf(log, e, psha);
      if (v.b64enc(leaf) !== e.leaf) throw new Error('the recomputed leaf differs from the one served');
      const h = await v.leafHash(leaf);
      if (v.b64enc(h) !== e.leaf_hash) throw new Error(`the leaf hashes to ${v.b64enc(h)}, the server says ${e.leaf_hash}`);
      return Object.assign(h, { detail: 'leaf hash ' + v.b64enc(h) });
    });
    await run('inclusion', 'Inclusion proof to the signed root (RFC 6962)', async () => {
      const p = await api(`${logPath}/proof/inclusion?index=${e.index}&size=${cp.size}`);
      const root = await v.rootFromInclusion(e.index, cp.size, lh, p.hashes.map(v.b64dec));
      if (!v.equal(root, cp.root)) throw new Error(`the proof leads to root ${v.b64enc(root)}, the signed checkpoint has ${v.b64enc(cp.root)}`);
      return { detail: `${p.hashes.length} hashes, root ${v.b64enc(root)}` };
    });
    verdict.className = 'verdict pass';
    verdict.dataset.result = 'pass';
    verdict.textContent = `VERIFIED: entry ${e.index} (${e.id}) of ${log} is in the tree of size ${cp.size} signed by ${vk.name}.`;
  } catch (err) {
    verdict.className = 'verdict fail';
    verdict.dataset.result = 'fail';
    verdict.textContent = `NOT VERIFIED: ${err.step || 'verification'} failed: ${err.message}`;
  }
  verdict.hidden = false;
}

function init() {
  const pinned = localStorage.getItem('auditd-verifier-key');
  if (pinned) { $('#vkey').value = pinned; $('#pin').checked = true; }
  $('#token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.token = $('#token').value.trim();
    sessionStorage.setItem('auditd-token', state.token);
    $('#token-form').hidden = true;
    if (state.tokenSet) { state.tokenSet(); state.tokenSet = null; }
    refresh();
  });
  $('#verify-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('#vkey').value;
    if ($('#pin').checked) localStorage.setItem('auditd-verifier-key', key.trim()); else localStorage.removeItem('auditd-verifier-key');
    verifyEntry(key, $('#vlog').value.trim(), $('#vwhich').value);
  });
  $('#drift').addEventListener('click', (ev) => {
    const b = ev.target.closest('button.verify-entry');
    if (!b) return;
    $('#vlog').value = b.dataset.log;
    $('#vwhich').value = '#' + b.dataset.index;
    $('#verify-section').scrollIntoView();
    verifyEntry($('#vkey').value, b.dataset.log, '#' + b.dataset.index);
  });
  refresh();
  setInterval(refresh, 3000);
  followAlerts();
}

init();
