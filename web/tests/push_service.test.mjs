// The browser test's push service (push_service.mjs) checked on its own, with no server
// and no browser: it decrypts RFC 8291's worked example and bodies made here in several
// records, refuses a body whose tag was tampered with, and accepts a VAPID header only
// when its signature, audience, expiry and contact hold.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCipheriv, createECDH, generateKeyPairSync, hkdfSync, randomBytes, sign } from 'node:crypto';
import { b64url, checkVapid, decrypt, selfCheck, startPushService } from './push_service.mjs';

/** RFC 8291 encryption as an application server does it, split into records of `rs`. */
function encrypt(plaintext, { uaPublic, auth }, rs = 4096) {
  const sender = createECDH('prime256v1');
  sender.generateKeys();
  const asPublic = sender.getPublicKey();
  const salt = randomBytes(16);
  const shared = sender.computeSecret(uaPublic);
  const ikm = Buffer.from(hkdfSync('sha256', shared, auth, Buffer.concat([Buffer.from('WebPush: info\0'), uaPublic, asPublic]), 32));
  const cek = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const chunk = rs - 17; // each record: data, a delimiter, a 16-byte tag
  const records = [];
  for (let i = 0, at = 0; at < plaintext.length || i === 0; i++, at += chunk) {
    const data = plaintext.subarray(at, at + chunk);
    const last = at + chunk >= plaintext.length;
    const iv = Buffer.from(nonce);
    iv.writeUInt32BE((iv.readUInt32BE(8) ^ i) >>> 0, 8);
    const cipher = createCipheriv('aes-128-gcm', cek, iv);
    const sealed = Buffer.concat([cipher.update(Buffer.concat([data, Buffer.from([last ? 2 : 1])])), cipher.final()]);
    records.push(sealed, cipher.getAuthTag());
    if (last) break;
  }
  const header = Buffer.alloc(21);
  salt.copy(header);
  header.writeUInt32BE(rs, 16);
  header[20] = 65;
  return Buffer.concat([header, asPublic, ...records]);
}

function userAgent() {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  return { uaPublic: ecdh.getPublicKey(), uaPrivate: ecdh.getPrivateKey(), auth: randomBytes(16) };
}

/** A VAPID header signed by a fresh key, with `claims` over the defaults. */
function vapidHeader(claims = {}, { der = false } = {}) {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = publicKey.export({ format: 'jwk' });
  const k = b64url.encode(Buffer.concat([Buffer.from([4]), b64url.decode(jwk.x), b64url.decode(jwk.y)]));
  const head = b64url.encode(JSON.stringify({ typ: 'JWT', alg: 'ES256' }));
  const body = b64url.encode(JSON.stringify({ aud: 'http://127.0.0.1:9', exp: Math.floor(Date.now() / 1000) + 12 * 3600, sub: 'mailto:ops@example.com', ...claims }));
  const signature = sign('sha256', Buffer.from(`${head}.${body}`), { key: privateKey, dsaEncoding: der ? 'der' : 'ieee-p1363' });
  return `vapid t=${head}.${body}.${b64url.encode(signature)}, k=${k}`;
}

test('RFC 8291’s example and bodies of one or several records decrypt; a changed byte does not', () => {
  selfCheck();
  const ua = userAgent();
  for (const [text, rs] of [['{"v":1,"kind":"approval"}', 4096], ['x'.repeat(100), 25]]) {
    const body = encrypt(Buffer.from(text), ua, rs);
    assert.equal(decrypt(body, ua).toString(), text);
    const tampered = Buffer.from(body);
    tampered[tampered.length - 1] ^= 1;
    assert.throws(() => decrypt(tampered, ua), /unable to authenticate|Unsupported state/);
  }
  assert.throws(() => decrypt(encrypt(Buffer.from('hi'), ua), userAgent()), 'another subscription’s keys');
});

test('a VAPID header is accepted only when its signature, audience, expiry and contact hold', () => {
  const origin = 'http://127.0.0.1:9';
  assert.equal(checkVapid(vapidHeader(), origin).claims.sub, 'mailto:ops@example.com');
  assert.throws(() => checkVapid(vapidHeader({ aud: 'http://127.0.0.1:10' }), origin), /aud/);
  assert.throws(() => checkVapid(vapidHeader({ exp: Math.floor(Date.now() / 1000) - 1 }), origin), /passed/);
  assert.throws(() => checkVapid(vapidHeader({ exp: Math.floor(Date.now() / 1000) + 25 * 3600 }), origin), /24 hours/);
  assert.throws(() => checkVapid(vapidHeader({ sub: 'ops' }), origin), /contact/);
  assert.throws(() => checkVapid(vapidHeader({}, { der: true }), origin), /signature/);
  // Someone else's key in k: the signature no longer verifies.
  const [t] = vapidHeader().split(', k=');
  const [, k] = vapidHeader().split(', k=');
  assert.throws(() => checkVapid(`${t}, k=${k}`, origin), /signature/);
});

test('the push service answers 201 to a good push and keeps its plaintext, 403 to a bad signature', async (t) => {
  const service = await startPushService();
  t.after(() => service.close());
  const subscription = service.subscribe();
  const ua = { uaPublic: b64url.decode(subscription.keys.p256dh), auth: b64url.decode(subscription.keys.auth) };
  const good = vapidHeader({ aud: service.origin });
  const push = (authorization) =>
    fetch(subscription.endpoint, {
      method: 'POST',
      headers: { authorization, 'content-encoding': 'aes128gcm', ttl: '60', urgency: 'high' },
      body: encrypt(Buffer.from('{"v":1,"kind":"question"}'), ua),
    });
  assert.equal((await push(good)).status, 201);
  const message = await service.next();
  assert.deepEqual(message.json, { v: 1, kind: 'question' });
  assert.equal(message.headers.urgency, 'high');
  assert.equal((await push(vapidHeader())).status, 403, 'aud names another origin');
  assert.equal(service.problems.length, 1);
});
