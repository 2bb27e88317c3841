// End to end: RATE requests/s (default 10,000) for DURATION seconds; one
// accepted order in SAMPLE (default 100) is followed with GET
// /api/orders/{orderNo} every 50 ms until it reads WAITING_PAY, giving the
// time from the 202 to WAITING_PAY. The pipeline's drain rate needs the
// MySQL counts: `stampede bench --scenarios e2e` measures it.
import exec from 'k6/execution';
import http from 'k6/http';
import { sleep } from 'k6';
import { Trend } from 'k6/metrics';
import { BASE_URL, RUN_ID, USER_BASE, createProduct, env, order, orderNo, token } from './lib.js';

const RATE = env('RATE', 10000);
const DURATION = env('DURATION', 10);
const SAMPLE = env('SAMPLE', 100);
const USERS = env('USERS', 100000);
const toWaitingPay = new Trend('to_waiting_pay', true);

export const options = {
  scenarios: {
    intake: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: `${DURATION}s`,
      preAllocatedVUs: env('VUS', 1000),
      maxVUs: env('MAX_VUS', 5000),
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.001'],
    'http_req_duration{name:POST /api/orders}': ['p(95)<50', 'p(99)<100'],
    to_waiting_pay: ['p(50)<1000', 'p(99)<5000'],
    orders_sold_out: ['count==0'],
    orders_other: ['count==0'],
  },
};

export function setup() {
  return { productId: createProduct('e2e', Math.max(2 * RATE * DURATION, 1000), 0) };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  const user = USER_BASE + (i % USERS) + 1;
  const res = order(data.productId, user, `${RUN_ID}-e2-${i}`);
  if (res.status !== 202 || i % SAMPLE !== 0) return;
  const no = orderNo(res);
  const accepted = Date.now();
  const deadline = accepted + 30000;
  while (Date.now() < deadline) {
    const r = http.get(`${BASE_URL}/api/orders/${no}`, {
      headers: { Authorization: `Bearer ${token(user)}` }, tags: { name: 'GET /api/orders/{orderNo}' },
    });
    if (r.status === 200 && JSON.parse(r.body).status === 'WAITING_PAY') {
      toWaitingPay.add(Date.now() - accepted);
      return;
    }
    sleep(0.05);
  }
  toWaitingPay.add(30000);
}
