// A local Web Push service, the receiving side of RFC 8030, for the browser tests: it
// mints subscriptions (a P-256 key pair and an auth secret, as a browser would), takes
// the server's pushes over loopback HTTP, checks each one's VAPID signature (RFC 8292)
// and decrypts its body (RFC 8291 over RFC 8188's aes128gcm) with the subscription's keys.
//
// Written with node:crypto alone, apart from the Rust side's crates, so the browser test
// checks the server's encryption with a second, independent decryptor: a message only
// reaches the test if both the signature and the AEAD tag hold. `selfCheck()` runs the
// decryptor over RFC 8291's own worked example (Appendix A) first.

import { createECDH, createPublicKey, hkdfSync, createDecipheriv, randomBytes, verify } from 'node:crypto';
import http from 'node:http';

export const b64url = {
  encode: (bytes) => Buffer.from(bytes).toString('base64url'),
  decode: (text) => Buffer.from(text, 'base64url'),
};

/**
 * Decrypts an `aes128gcm` push body (RFC 8291 §3.4, RFC 8188 §2) for the user agent
 * whose private key is `uaPrivate` (32 bytes) and auth secret `auth` (16 bytes).
 * Throws when the header, the key or any record's tag does not hold.
 */
export function decrypt(body, { uaPrivate, auth }) {
  if (body.length < 21) throw new Error(`a body of ${body.length} bytes has no aes128gcm header`);
  const salt = body.subarray(0, 16);
  const rs = body.readUInt32BE(16);
  const idlen = body[20];
  if (idlen !== 65) throw new Error(`keyid of ${idlen} bytes: RFC 8291 puts the 65-byte sender key there`);
  const asPublic = body.subarray(21, 21 + idlen);
  const records = body.subarray(21 + idlen);
  if (rs < 18) throw new Error(`record size ${rs} is under the minimum of 18`);

  const ecdh = createECDH('prime256v1');
  ecdh.setPrivateKey(uaPrivate);
  const uaPublic = ecdh.getPublicKey();
  const shared = ecdh.computeSecret(asPublic);
  // RFC 8291 §3.4: HKDF(salt = auth, IKM = ECDH secret, info = "WebPush: info" 0x00 ua_public as_public).
  const keyInfo = Buffer.concat([Buffer.from('WebPush: info\0'), uaPublic, asPublic]);
  const ikm = Buffer.from(hkdfSync('sha256', shared, auth, keyInfo, 32));
  const cek = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));

  const parts = [];
  const count = Math.ceil(records.length / rs);
  for (let i = 0; i < count; i++) {
    const record = records.subarray(i * rs, Math.min((i + 1) * rs, records.length));
    if (record.length < 17) throw new Error(`record ${i} is too short for a tag`);
    // RFC 8188 §2.3: the record's sequence number XORed into the nonce's last bytes (a
    // 96-bit big-endian number; records here are far fewer than 2^32, so the last 4 do).
    const iv = Buffer.from(nonce);
    iv.writeUInt32BE((iv.readUInt32BE(8) ^ i) >>> 0, 8);
    const decipher = createDecipheriv('aes-128-gcm', cek, iv);
    decipher.setAuthTag(record.subarray(record.length - 16));
    const plain = Buffer.concat([decipher.update(record.subarray(0, record.length - 16)), decipher.final()]);
    // Padding: the data, one delimiter (2 in the last record, 1 before), then zeros.
    let end = plain.length - 1;
    while (end >= 0 && plain[end] === 0) end--;
    const last = i === count - 1;
    if (end < 0 || plain[end] !== (last ? 2 : 1)) throw new Error(`record ${i} has no ${last ? 'last' : 'non-last'} delimiter`);
    parts.push(plain.subarray(0, end));
  }
  return Buffer.concat(parts);
}

/**
 * Checks an `Authorization: vapid t=<JWT>, k=<key>` header (RFC 8292 §2–3) for a push
 * to `origin`: ES256 over the JWT with the key in `k`, `aud` = the push service's
 * origin, `exp` in the future and at most 24 h ahead, `sub` a contact. Returns
 * `{k, claims}`; throws saying what fails.
 */
export function checkVapid(header, origin, now = Date.now()) {
  const m = /^vapid\s+(.*)$/i.exec(header ?? '');
  if (!m) throw new Error(`Authorization is not the vapid scheme: ${header}`);
  const params = Object.fromEntries(m[1].split(',').map((p) => p.trim().split(/=(.*)/s).slice(0, 2)));
  const { t, k } = params;
  if (!t || !k) throw new Error(`vapid needs t and k: ${header}`);
  const key = b64url.decode(k);
  if (key.length !== 65 || key[0] !== 4) throw new Error('k is not an uncompressed P-256 point');
  const [head, payload, signature] = t.split('.');
  const jwtHeader = JSON.parse(b64url.decode(head));
  if (jwtHeader.alg !== 'ES256') throw new Error(`the JWT is signed with ${jwtHeader.alg}, not ES256`);
  const publicKey = createPublicKey({
    key: { kty: 'EC', crv: 'P-256', x: b64url.encode(key.subarray(1, 33)), y: b64url.encode(key.subarray(33)) },
    format: 'jwk',
  });
  // JWS ES256 signatures are R‖S (64 bytes), not DER: node reads that form as ieee-p1363.
  const ok = verify('sha256', Buffer.from(`${head}.${payload}`), { key: publicKey, dsaEncoding: 'ieee-p1363' }, b64url.decode(signature));
  if (!ok) throw new Error('the VAPID signature does not verify with k');
  const claims = JSON.parse(b64url.decode(payload));
  if (claims.aud !== origin) throw new Error(`aud is ${claims.aud}, not this push service's ${origin}`);
  const seconds = Math.floor(now / 1000);
  if (!(claims.exp > seconds)) throw new Error(`exp ${claims.exp} has passed`);
  if (claims.exp > seconds + 24 * 3600) throw new Error(`exp ${claims.exp} is more than 24 hours ahead`);
  if (!/^(mailto:|https:)/.test(claims.sub ?? '')) throw new Error(`sub ${claims.sub} is not a mailto: or https: contact`);
  return { k, claims };
}

/** RFC 8291 Appendix A through `decrypt`: throws unless it gives the example's plaintext. */
export function selfCheck() {
  const body = b64url.decode(
    'DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN',
  );
  const plain = decrypt(body, { uaPrivate: b64url.decode('q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94'), auth: b64url.decode('BTBZMqHH6r4Tts7J_aSIgg') });
  if (plain.toString() !== 'When I grow up, I want to be a watermelon') throw new Error(`RFC 8291's example decrypts to ${plain}`);
}

/**
 * Starts the push service on a loopback port. `subscribe()` mints a subscription in
 * the shape of `PushSubscription.toJSON()`; every push to it is checked and decrypted
 * into `messages` (`{subscription, json, text, headers, vapid}`), and `next()` waits for
 * the next one. A push that fails a check is answered 400 (403 for VAPID) and kept in
 * `problems`, which a test asserts empty. `answer(status)` makes the next pushes get
 * that status instead (410: the subscription is gone).
 */
export async function startPushService() {
  selfCheck();
  const subscriptions = new Map(); // id → {uaPrivate, auth}
  const messages = [];
  const problems = [];
  const waiters = [];
  let forced = null;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const reply = (status, text = '') => {
        res.writeHead(status, status === 201 ? { location: `${origin}/message/${messages.length}` } : {});
        res.end(text);
      };
      const m = /^\/push\/([A-Za-z0-9_-]+)$/.exec(req.url);
      const subscription = m && subscriptions.get(m[1]);
      if (req.method !== 'POST' || !subscription) return reply(404);
      if (forced) return reply(forced);
      let vapid;
      try {
        vapid = checkVapid(req.headers.authorization, origin);
      } catch (e) {
        problems.push(`VAPID: ${e.message}`);
        return reply(403, e.message);
      }
      try {
        if (req.headers['content-encoding'] !== 'aes128gcm') throw new Error(`Content-Encoding is ${req.headers['content-encoding']}`);
        if (!/^\d+$/.test(req.headers.ttl ?? '')) throw new Error(`TTL is ${req.headers.ttl} (RFC 8030 requires it)`);
        const text = decrypt(Buffer.concat(chunks), subscription).toString('utf8');
        const message = {
          subscription: m[1],
          text,
          json: JSON.parse(text),
          vapid,
          headers: { ttl: req.headers.ttl, urgency: req.headers.urgency, topic: req.headers.topic },
        };
        messages.push(message);
        for (const w of waiters.splice(0)) w();
        return reply(201);
      } catch (e) {
        problems.push(`body: ${e.message}`);
        return reply(400, e.message);
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return {
    origin,
    messages,
    problems,
    /** A new subscription, as `PushSubscription.toJSON()` gives it. */
    subscribe() {
      const ecdh = createECDH('prime256v1');
      ecdh.generateKeys();
      const auth = randomBytes(16);
      const id = b64url.encode(randomBytes(12));
      subscriptions.set(id, { uaPrivate: ecdh.getPrivateKey(), auth });
      return { endpoint: `${origin}/push/${id}`, expirationTime: null, keys: { p256dh: b64url.encode(ecdh.getPublicKey()), auth: b64url.encode(auth) } };
    },
    /** The first message (from the `from`th on) that `match` accepts, waiting up to `ms`. */
    async next(match = () => true, { from = 0, ms = 15_000 } = {}) {
      const end = Date.now() + ms;
      for (;;) {
        const found = messages.slice(from).find(match);
        if (found) return found;
        if (problems.length) throw new Error(`the push service refused a push: ${problems.join('; ')}`);
        const left = end - Date.now();
        if (left <= 0) throw new Error(`no matching push in ${ms} ms (${messages.length} received)`);
        await new Promise((r) => {
          const timer = setTimeout(r, left);
          waiters.push(() => {
            clearTimeout(timer);
            r();
          });
        });
      }
    },
    answer(status) {
      forced = status;
    },
    close: () => new Promise((r) => server.close(r)),
  };
}
