// Shared helpers of Stampede's k6 scenarios (see bench/README.md).
//
// Every script creates its own product through the admin API in setup(),
// signs real HS256 JWTs with the gateway's secret (the same tokens
// `stampede token` issues) and uses an arrival-rate executor: k6 starts
// iterations on a schedule whatever the server's latency (an open model),
// and reports iterations it could not start as dropped_iterations.
//
// Environment: STAMPEDE_URL (http://127.0.0.1:8080), STAMPEDE_JWT_SECRET
// (the development default), RUN_ID (a fresh one per run: requestIds must
// never repeat for a user across runs), USER_BASE (first userId).
import http from 'k6/http';
import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import { Counter, Trend } from 'k6/metrics';

export const BASE_URL = __ENV.STAMPEDE_URL || 'http://127.0.0.1:8080';
const SECRET = __ENV.STAMPEDE_JWT_SECRET || 'stampede-dev-jwt-secret-change-me';
export const RUN_ID = __ENV.RUN_ID || Date.now().toString(36);
export const USER_BASE = Number(__ENV.USER_BASE || 8000000000);

export function env(name, fallback) {
  const v = __ENV[name];
  return v === undefined || v === '' ? fallback : Number(v);
}

// Outcome counters and latencies, by class.
export const accepted = new Counter('orders_accepted');
export const soldOut = new Counter('orders_sold_out');
export const replayed = new Counter('orders_replayed');
export const other = new Counter('orders_other');
export const acceptedLatency = new Trend('orders_accepted_duration', true);
export const rejectedLatency = new Trend('orders_rejected_duration', true);

// 200, 202 and 409 are answers the scenarios expect; anything else counts
// in http_req_failed.
http.setResponseCallback(http.expectedStatuses(200, 202, 409));

function b64(obj) {
  return encoding.b64encode(JSON.stringify(obj), 'rawurl');
}

const tokens = new Map();

// token returns a bearer token for userId (cached per VU; 12 h, an admin's
// 1 h: gateways refuse HS256 tokens beyond 24 h, admins' beyond 1 h). iss and
// aud are the gateway's HS256 defaults (STAMPEDE_JWT_HS256_ISSUER/_AUDIENCE).
export function token(userId, admin = false) {
  const key = `${userId}:${admin}`;
  let t = tokens.get(key);
  if (t) return t;
  const now = Math.floor(Date.now() / 1000);
  const life = admin ? 3600 : 12 * 3600;
  const claims = { sub: String(userId), iat: now, exp: now + life, iss: 'stampede', aud: 'stampede' };
  if (admin) claims.role = 'admin';
  const unsigned = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  t = `${unsigned}.${crypto.hmac('sha256', SECRET, unsigned, 'base64rawurl')}`;
  if (tokens.size > 20000) tokens.clear();
  tokens.set(key, t);
  return t;
}

// createProduct creates a product on sale now and returns its id.
export function createProduct(name, stock, perUserLimit) {
  const now = Date.now();
  const res = http.post(`${BASE_URL}/api/admin/products`, JSON.stringify({
    name: `k6 ${name} ${RUN_ID}`, price: 100, stock, perUserLimit, shards: env('SHARDS', 1),
    saleStart: new Date(now - 60000).toISOString().replace(/\.\d+Z$/, 'Z'),
    saleEnd: new Date(now + 86400000).toISOString().replace(/\.\d+Z$/, 'Z'),
  }), { headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token(1, true)}` } });
  if (res.status !== 201) {
    throw new Error(`create product: ${res.status} ${res.body}`);
  }
  return JSON.parse(res.body).id;
}

// order sends POST /api/orders for (userId, requestId) and counts the
// outcome. It returns the response.
export function order(productId, userId, requestId) {
  const res = http.post(`${BASE_URL}/api/orders`,
    `{"productId":${productId},"quantity":1,"requestId":"${requestId}"}`,
    {
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token(userId)}` },
      tags: { name: 'POST /api/orders' },
    });
  const ms = res.timings.duration;
  if (res.status === 202) {
    accepted.add(1);
    acceptedLatency.add(ms);
  } else if (res.status === 200) {
    replayed.add(1);
    acceptedLatency.add(ms);
  } else if (res.status === 409 && String(res.body).includes('"SOLD_OUT"')) {
    soldOut.add(1);
    rejectedLatency.add(ms);
  } else {
    other.add(1);
  }
  return res;
}

// orderNo reads the orderNo of a 200/202 answer ('' if none).
export function orderNo(res) {
  try {
    return JSON.parse(res.body).orderNo || '';
  } catch (e) {
    return '';
  }
}
