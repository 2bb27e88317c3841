// Spike: BUYERS distinct buyers (default 100,000), one request each, for
// STOCK units (default 1,000, one per buyer) at RATE requests/s.
//
//   k6 run -e STAMPEDE_URL=http://127.0.0.1:8080 bench/k6/spike.js
import exec from 'k6/execution';
import http from 'k6/http';
import { check } from 'k6';
import { BASE_URL, RUN_ID, USER_BASE, createProduct, env, order } from './lib.js';

const BUYERS = env('BUYERS', 100000);
const STOCK = env('STOCK', 1000);
const RATE = env('RATE', 25000);

export const options = {
  scenarios: {
    spike: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: `${Math.ceil((BUYERS / RATE) * 1000)}ms`,
      preAllocatedVUs: env('VUS', 1000),
      maxVUs: env('MAX_VUS', 5000),
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.001'],
    'http_req_duration{name:POST /api/orders}': ['p(95)<50', 'p(99)<100'],
    orders_accepted: [`count<=${STOCK}`], // never oversold
    orders_other: ['count==0'],
    dropped_iterations: ['count==0'],
  },
};

export function setup() {
  return { productId: createProduct('spike', STOCK, 1) };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  if (i >= BUYERS) return;
  order(data.productId, USER_BASE + i + 1, `${RUN_ID}-sp-${i}`);
}

export function teardown(data) {
  const res = http.get(`${BASE_URL}/api/products/${data.productId}`);
  check(res, { 'product sold out': (r) => r.status === 200 && JSON.parse(r.body).soldOut === true });
}
