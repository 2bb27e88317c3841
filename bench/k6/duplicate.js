// Duplicate storm: KEYS requestIds (default 2,000, one per buyer) each sent
// REPLAYS times (default 50), in rounds of BURST consecutive sends of the
// same requestId, at RATE requests/s. Every answer must be 202 (the first)
// or 200 with an orderNo; teardown() lists each buyer's orders and requires
// exactly one for this product.
import exec from 'k6/execution';
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { BASE_URL, RUN_ID, USER_BASE, createProduct, env, order, orderNo, token } from './lib.js';

const KEYS = env('KEYS', 2000);
const REPLAYS = env('REPLAYS', 50);
const BURST = Math.min(env('BURST', 10), REPLAYS);
const RATE = env('RATE', 20000);
const duplicates = new Counter('duplicate_orders');

export const options = {
  scenarios: {
    duplicates: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: `${Math.ceil((KEYS * REPLAYS * 1000) / RATE)}ms`,
      preAllocatedVUs: env('VUS', 1000),
      maxVUs: env('MAX_VUS', 5000),
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.001'],
    'http_req_duration{name:POST /api/orders}': ['p(95)<50', 'p(99)<100'],
    orders_accepted: [`count<=${KEYS}`],
    orders_sold_out: ['count==0'],
    orders_other: ['count==0'],
    duplicate_orders: ['count==0'],
    checks: ['rate==1'],
  },
};

// keyOf maps iteration i to its requestId number, as the Go benchmark does.
function keyOf(i) {
  const round = Math.floor(i / (KEYS * BURST));
  const inRound = i - round * KEYS * BURST;
  const burst = Math.min(BURST, REPLAYS - round * BURST);
  return Math.floor(inRound / burst);
}

export function setup() {
  return { productId: createProduct('duplicate', 2 * KEYS, 0) };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  if (i >= KEYS * REPLAYS) return;
  const k = keyOf(i);
  const res = order(data.productId, USER_BASE + k + 1, `${RUN_ID}-du-${k}`);
  check(res, { 'first 202 or replay 200 with an orderNo': (r) => (r.status === 202 || r.status === 200) && orderNo(r) !== '' });
}

export function teardown(data) {
  for (let k = 0; k < KEYS; k++) {
    const res = http.get(`${BASE_URL}/api/orders?limit=100`, {
      headers: { Authorization: `Bearer ${token(USER_BASE + k + 1)}` }, tags: { name: 'GET /api/orders' },
    });
    if (res.status !== 200) continue;
    const mine = JSON.parse(res.body).orders.filter((o) => Number(o.productId) === data.productId);
    if (mine.length !== 1) duplicates.add(Math.max(mine.length - 1, 1));
  }
}
