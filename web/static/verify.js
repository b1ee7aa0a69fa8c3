// Verification of auditd's checkpoints, leaves and inclusion proofs in the
// browser, with WebCrypto only: Ed25519 for the signed note (C2SP
// signed-note, as golang.org/x/mod/sumdb/note), SHA-256 for the leaf
// (docs/ledger-format.md, version 1) and the RFC 6962 tree.

const utf8 = new TextEncoder();

export function b64dec(s) {
  if (typeof s !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) throw new Error('not standard base64: ' + String(s).slice(0, 40));
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function b64enc(u8) {
  let s = '';
  for (const b of u8) s += String.fromCharCode(b);
  return btoa(s);
}

export function hex(u8) {
  return Array.from(u8, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function concat(...parts) {
  const n = parts.reduce((a, p) => a + p.length, 0);
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

export function equal(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export async function sha256(u8) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', u8));
}

// parseVerifierKey reads a note verifier key NAME+HASH+KEY: KEY is base64
// of the algorithm byte 0x01 (Ed25519) and the 32-byte public key, HASH the
// first 4 bytes of SHA-256(NAME "\n" 0x01 public key) in hex.
export async function parseVerifierKey(text) {
  // The key's base64 may hold '+' too: split at the first two.
  const t = text.trim();
  const i = t.indexOf('+'), j = t.indexOf('+', i + 1);
  if (i <= 0 || j < 0) throw new Error('a verifier key is NAME+HASH+KEY (the .pub file of the signing key)');
  const name = t.slice(0, i), hashHex = t.slice(i + 1, j), keyB64 = t.slice(j + 1);
  if (!/^[0-9a-f]{8}$/.test(hashHex)) throw new Error(`key hash ${JSON.stringify(hashHex)} is not 8 hex digits`);
  const raw = b64dec(keyB64);
  if (raw.length !== 33 || raw[0] !== 1) throw new Error('not an Ed25519 verifier key (algorithm byte 0x01 and 32 key bytes)');
  const h = (await sha256(concat(utf8.encode(name + '\n'), raw))).slice(0, 4);
  if (hex(h) !== hashHex) throw new Error(`the key hash ${hashHex} does not match the key (${hex(h)})`);
  const key = await crypto.subtle.importKey('raw', raw.slice(1), { name: 'Ed25519' }, false, ['verify']);
  return { name, hash: h, hashHex, key };
}

// parseCheckpoint splits a signed note into its text and signatures and
// reads the checkpoint body: origin, size, root hash.
export function parseCheckpoint(note) {
  const i = note.indexOf('\n\n');
  if (i < 0 || !note.endsWith('\n')) throw new Error('not a signed note (no blank line before the signatures)');
  const text = note.slice(0, i + 1);
  const lines = text.split('\n');
  if (lines.length < 4 || !/^(0|[1-9][0-9]*)$/.test(lines[1])) throw new Error('not a checkpoint: want origin, size and root hash lines');
  const root = b64dec(lines[2]);
  if (root.length !== 32) throw new Error('the root hash is not 32 bytes');
  const sigs = [];
  for (const line of note.slice(i + 2).split('\n')) {
    if (line === '') continue;
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m) throw new Error('malformed signature line: ' + line.slice(0, 60));
    const b = b64dec(m[2]);
    if (b.length < 5) throw new Error('signature too short');
    sigs.push({ name: m[1], hash: b.slice(0, 4), sig: b.slice(4) });
  }
  return { text, origin: lines[0], size: BigInt(lines[1]), root, sigs };
}

// verifyCheckpoint checks that one of the note's signatures is by vk and
// verifies; it throws saying who did sign otherwise.
export async function verifyCheckpoint(cp, vk) {
  const mine = cp.sigs.filter((s) => s.name === vk.name && equal(s.hash, vk.hash));
  if (mine.length === 0) {
    const by = cp.sigs.map((s) => `${s.name} (key hash ${hex(s.hash)})`).join(', ') || 'nobody';
    throw new Error(`no signature by ${vk.name} (key hash ${vk.hashHex}); signed by ${by}`);
  }
  for (const s of mine) {
    if (s.sig.length === 64 && await crypto.subtle.verify({ name: 'Ed25519' }, vk.key, s.sig, utf8.encode(cp.text))) return;
  }
  throw new Error(`the signature by ${vk.name} does not verify: the note was altered or signed by another key`);
}

const markNames = ['not_json', 'not_utf8', 'empty', 'oversize', 'duplicate_id', 'key_oversize'];

function u16(n) { if (n < 0 || n > 0xffff) throw new Error('length over 65535'); return new Uint8Array([n >> 8, n & 0xff]); }
function u32(n) { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, n); return b; }
function i32(n) { const b = new Uint8Array(4); new DataView(b.buffer).setInt32(0, n); return b; }
function i64(n) { const b = new Uint8Array(8); new DataView(b.buffer).setBigInt64(0, BigInt(n)); return b; }

// unixNanos reads RFC 3339 UTC time with up to nine fractional digits.
export function unixNanos(t) {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/.exec(t);
  if (!m) throw new Error(`time ${JSON.stringify(t)} is not RFC 3339 UTC`);
  const ms = Date.parse(m[1] + 'Z');
  if (Number.isNaN(ms)) throw new Error(`time ${t} does not parse`);
  return BigInt(ms / 1000) * 1000000000n + BigInt((m[2] || '').padEnd(9, '0'));
}

// payloadHash is the SHA-256 of the entry's payload bytes (payload_base64),
// or, for a pruned payload, the payload_sha256 the server states.
export async function payloadHash(e) {
  if (typeof e.payload_base64 === 'string') return sha256(b64dec(e.payload_base64));
  if (e.payload_pruned) return b64dec(e.payload_sha256);
  throw new Error('the entry has no payload_base64 (ask with ?payload=base64)');
}

// encodeLeaf is the version 1 leaf of docs/ledger-format.md.
export function encodeLeaf(log, e, psha) {
  const id = utf8.encode(e.id);
  const logb = utf8.encode(log);
  let key = null;
  if ('key' in e) key = utf8.encode(e.key);
  else if ('key_base64' in e) key = b64dec(e.key_base64);
  const src = e.source || null;
  const hdrs = e.headers || [];
  let marks = 0;
  for (const m of e.marks || []) {
    const i = markNames.indexOf(m);
    if (i < 0) throw new Error('unknown mark ' + m);
    marks |= 1 << i;
  }
  const flags = (key ? 1 : 0) | (e.time_assigned ? 2 : 0) | (src ? 4 : 0) | (hdrs.length ? 8 : 0) | (marks ? 16 : 0);
  if (logb.length < 1 || logb.length > 255) throw new Error('log name length');
  const parts = [new Uint8Array([1, logb.length]), logb, u16(id.length), id, new Uint8Array([flags])];
  if (key) parts.push(u16(key.length), key);
  parts.push(i64(unixNanos(e.time)));
  if (src) { const t = utf8.encode(src.topic); parts.push(u16(t.length), t, i32(src.partition), i64(src.offset)); }
  if (hdrs.length) {
    parts.push(u16(hdrs.length));
    for (const h of hdrs) { const k = utf8.encode(h.key); const v = b64dec(h.value || ''); parts.push(u16(k.length), k, u32(v.length), v); }
  }
  if (marks) parts.push(new Uint8Array([marks]));
  parts.push(psha);
  return concat(...parts);
}

export async function leafHash(leaf) { return sha256(concat(new Uint8Array([0]), leaf)); }

async function nodeHash(l, r) { return sha256(concat(new Uint8Array([1]), l, r)); }

// rootFromInclusion computes the root a proof leads to from the leaf hash
// at index in a tree of size (RFC 9162, section 2.1.3.2).
export async function rootFromInclusion(index, size, leaf, proof) {
  let fn = BigInt(index), sn = BigInt(size) - 1n;
  if (fn > sn) throw new Error(`index ${index} is not below the tree size ${size}`);
  let r = leaf;
  for (const p of proof) {
    if (p.length !== 32) throw new Error('a proof hash is not 32 bytes');
    if (sn === 0n) throw new Error('the proof is longer than the tree is deep');
    if ((fn & 1n) === 1n || fn === sn) {
      r = await nodeHash(p, r);
      while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
    } else {
      r = await nodeHash(r, p);
    }
    fn >>= 1n; sn >>= 1n;
  }
  if (sn !== 0n) throw new Error('the proof is shorter than the tree is deep');
  return r;
}
