// End-to-end test of auditd's status page in Debian's Chromium, driven by
// playwright-core. Run by cmd/auditd's TestStatusPageBrowser, which starts
// the daemon, a tampering proxy in front of it and a control endpoint, and
// passes them in the environment:
//   AUDITD_URL, AUDITD_TAMPER_URL, AUDITD_TOKEN, AUDITD_VKEY, AUDITD_OTHER_VKEY
//   (another key of the same name), AUDITD_LOG,
//   AUDITD_ENTRY, AUDITD_CONTROL_URL (POST /drift makes the derived store
//   wrong), AUDITD_SCREENSHOTS (a directory for the screenshots).
// Exits 0 when every check passed, 1 otherwise (with the reason and a
// screenshot of the page as it was).
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const env = (k) => { const v = process.env[k]; if (!v) { console.error(`${k} is not set`); process.exit(2); } return v; };
const url = env('AUDITD_URL'), tamperURL = env('AUDITD_TAMPER_URL'), token = env('AUDITD_TOKEN');
const vkey = env('AUDITD_VKEY'), log = env('AUDITD_LOG'), entry = env('AUDITD_ENTRY'), control = env('AUDITD_CONTROL_URL');
const shots = env('AUDITD_SCREENSHOTS');
fs.mkdirSync(shots, { recursive: true });

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'auditd-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--disable-quic', '--no-first-run'],
  viewport: { width: 1200, height: 1000 },
});
const consoleErrors = [];
let page;
const shot = async (p, name) => { await p.screenshot({ path: path.join(shots, name + '.png'), fullPage: true }); };
const check = (ok, msg) => { if (!ok) throw new Error(msg); console.log('ok:', msg); };

async function open(base) {
  const p = await context.newPage();
  // The requests made before the token is given answer 401, which Chromium
  // logs; any other error in the console is a fault of the page.
  p.on('console', (m) => { if (m.type() === 'error' && !/status of 401/.test(m.text())) consoleErrors.push(m.text()); });
  p.on('pageerror', (e) => consoleErrors.push(String(e)));
  await p.goto(base + '/');
  // Reads are protected: the page asks for the token, then loads.
  await p.waitForSelector('#token-form:not([hidden])', { timeout: 20000 });
  // Before the token, the alerts are unknown, not "none firing".
  await p.waitForSelector('#alerts li[data-unknown="token"]', { timeout: 20000 });
  check((await p.textContent('#alerts')).trim() === 'unknown: token needed', 'the alerts read "unknown: token needed" before the token is given');
  await p.fill('#token', token);
  await p.click('#token-form button');
  await p.waitForSelector(`#logs tr[data-log="${log}"]`, { timeout: 20000 });
  return p;
}

async function verify(p, key) {
  await p.fill('#vkey', key);
  await p.fill('#vlog', log);
  await p.fill('#vwhich', entry);
  await p.click('#verify-button');
  await p.waitForSelector('#verdict[data-result]', { timeout: 20000 });
  const verdict = await p.getAttribute('#verdict', 'data-result');
  const steps = await p.$$eval('#steps li', (ls) => ls.map((l) => ({ step: l.dataset.step, result: l.dataset.result || 'pending', text: l.textContent })));
  return { verdict, steps, text: await p.textContent('#verdict') };
}

let failed = false;
try {
  page = await open(url);
  check(await page.textContent('#conn') === 'connected', 'the page loads the logs with the read token');
  const derivation = await page.textContent('#derivations tr[data-derivation="balances"]');
  check(derivation.includes('clean'), `the derivation is shown clean (${derivation.trim()})`);
  // The header names the build, the origin and the uptime (GET /v1/info).
  await page.waitForFunction(() => /origin \S+ · up \d+s/.test(document.querySelector('#info').textContent), null, { timeout: 20000 });
  check(true, 'the header shows version, origin and uptime: ' + await page.textContent('#info'));
  // Charts from the daemon's own history: entries/s and checkpoint age of
  // the log, drifted keys of the derivation.
  for (const sel of [`#charts figure[data-chart="rate"][data-log="${log}"] polyline`, `#charts figure[data-chart="checkpoint-age"][data-log="${log}"] polyline`,
    '#charts figure[data-chart="drift"][data-derivation="balances"] polyline']) {
    await page.waitForSelector(sel, { state: 'attached', timeout: 30000 }); // a flat line has no height: "hidden"
  }
  check(true, 'the charts draw the log\'s entries/s and checkpoint age and the derivation\'s drifted keys');
  await shot(page, 'status-page');
  await (await page.$('#charts-section')).screenshot({ path: path.join(shots, 'status-page-charts.png') });

  // An honest entry verifies, every step passes.
  let r = await verify(page, vkey);
  check(r.verdict === 'pass', 'the honest entry verifies: ' + r.text);
  const want = ['key', 'checkpoint', 'signature', 'entry', 'payload', 'leaf', 'inclusion'];
  check(JSON.stringify(r.steps.map((s) => s.step)) === JSON.stringify(want) && r.steps.every((s) => s.result === 'pass'),
    'all seven steps pass: ' + r.steps.map((s) => `${s.step}=${s.result}`).join(' '));
  await shot(page, 'status-page-verified');

  // A key with the right name but not the signer's: the key parses, the
  // signature step fails and names the key that did sign.
  const other = await verify(page, env('AUDITD_OTHER_VKEY'));
  const sig = other.steps.find((s) => s.step === 'signature');
  check(other.verdict === 'fail' && other.steps[0].result === 'pass' && sig && sig.result === 'fail' && /signed by \S+ \(key hash [0-9a-f]{8}\)/.test(sig.text),
    'another key of the same name fails the signature step: ' + (sig ? sig.text : other.text));
  // A mangled key: refused before anything is fetched.
  const bad = await verify(page, 'someone-else' + vkey.slice(vkey.indexOf('+')));
  check(bad.verdict === 'fail' && bad.steps.length === 1 && bad.steps[0].result === 'fail', 'a key whose hash does not match is refused: ' + bad.text);

  // Through the tampering proxy (it changes the payload and recomputes
  // payload_sha256, leaf and leaf_hash to match), only the proof to the
  // signed root can catch it: that step fails, the earlier ones pass.
  const tp = await open(tamperURL);
  r = await verify(tp, vkey);
  const byStep = Object.fromEntries(r.steps.map((s) => [s.step, s.result]));
  check(r.verdict === 'fail', 'the tampered entry does not verify: ' + r.text);
  check(byStep.signature === 'pass' && byStep.payload === 'pass' && byStep.leaf === 'pass' && byStep.inclusion === 'fail',
    'the failing step is the inclusion proof: ' + r.steps.map((s) => `${s.step}=${s.result}`).join(' '));
  await shot(tp, 'status-page-tampered');
  await tp.close();

  // A drift alert appears without a reload.
  await page.evaluate(() => { window.__noReload = true; });
  const resp = await fetch(control + '/drift', { method: 'POST' });
  check(resp.ok, 'the test made the derived store wrong');
  await page.waitForSelector('#alerts li[data-alert="drift/balances"][data-state="firing"]', { timeout: 60000 });
  check(await page.evaluate(() => window.__noReload === true), 'the drift alert appeared live, without a reload');
  await page.waitForSelector('#derivations tr[data-derivation="balances"] .state-drift', { timeout: 20000 });
  await shot(page, 'status-page-alert');

  // The drift alert links to its evidence: bob's expected (ledger) and
  // stored values, and the entries behind it, each verifiable here.
  const ev = await page.getAttribute('#alerts li[data-alert="drift/balances"] a.evidence', 'href');
  check(ev === '#drift-balances', 'the drift alert links to its evidence: ' + ev);
  await page.waitForSelector('#drift-balances tr[data-key="bob"] .lineage button.verify-entry', { timeout: 30000 });
  const row = await page.$eval('#drift-balances tr[data-key="bob"]', (tr) => ({ expected: tr.querySelector('.expected').textContent, stored: tr.querySelector('.actual').textContent }));
  check(row.expected === '75' && row.stored === '74', `the evidence shows bob expected 75 and stored 74 (${JSON.stringify(row)})`);
  await page.fill('#vkey', vkey);
  await page.click('#drift-balances tr[data-key="bob"] .lineage button.verify-entry');
  await page.waitForSelector('#verdict[data-result]', { timeout: 20000 });
  const lv = await page.getAttribute('#verdict', 'data-result');
  check(lv === 'pass', 'a lineage entry of the drifted key verifies in the browser: ' + await page.textContent('#verdict'));
  await (await page.$('#drift-section')).screenshot({ path: path.join(shots, 'status-page-drift.png') });

  // At 600px nothing runs off the page: wide tables scroll in their box.
  await page.setViewportSize({ width: 600, height: 1000 });
  await page.waitForTimeout(300);
  const sw = await page.evaluate(() => document.documentElement.scrollWidth);
  check(sw <= 600, `the page holds at 600px (scroll width ${sw})`);
  await shot(page, 'status-page-600px');
  // A history with two samples at one instant (as a stalled sampler can
  // take) and one whose time does not parse: the charts leave those points
  // out and draw no NaN (a NaN point blanks the whole line and logs an
  // error per redraw).
  const t0 = Date.now() - 10000, iso = (ms) => new Date(ms).toISOString();
  const smp = (at, size) => ({ at, logs: { [log]: { size, checkpoint: size, checkpoint_age_seconds: 1.5 } }, drift_keys: { balances: 1 } });
  await context.route('**/v1/history', (r) => r.fulfill({ json: { interval_seconds: 1, samples: [
    smp(iso(t0), 10), smp(iso(t0 + 1000), 20), smp(iso(t0 + 1000), 20), smp('not a time', 25), smp(iso(t0 + 3000), 40),
    smp(iso(t0 + 4000), 50), smp(iso(t0 + 5000), 60)] } }));
  const odd = await open(url);
  await odd.waitForSelector(`#charts figure[data-chart="rate"][data-log="${log}"] polyline`, { state: 'attached', timeout: 20000 });
  const pts = await odd.$$eval('#charts polyline', (ls) => ls.map((l) => l.getAttribute('points')));
  check(pts.length >= 3 && pts.every((s) => !s.includes('NaN')), `charts of a history with a repeated and an unreadable sample time draw no NaN (${pts.length} lines)`);
  await context.unroute('**/v1/history');
  await odd.close();
  check(consoleErrors.length === 0, 'no errors in the browser console' + (consoleErrors.length ? ': ' + consoleErrors.join('; ') : ''));
} catch (e) {
  failed = true;
  console.error('FAIL:', e.message);
  if (page) await shot(page, 'failure').catch(() => {});
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
