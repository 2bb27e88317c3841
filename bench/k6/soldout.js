// Sold-out storm: a product of STOCK units (default 100) is sold out in
// setup(), then RATE requests/s (default 60,000) for DURATION seconds must
// all be answered 409 SOLD_OUT; the goal is >= 50,000 rejections/s.
import exec from 'k6/execution';
import { check } from 'k6';
import { RUN_ID, USER_BASE, createProduct, env, order } from './lib.js';

const STOCK = env('STOCK', 100);
const RATE = env('RATE', 60000);
const USERS = env('USERS', 100000);

export const options = {
  scenarios: {
    storm: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: `${env('DURATION', 5)}s`,
      preAllocatedVUs: env('VUS', 1000),
      maxVUs: env('MAX_VUS', 5000),
    },
  },
  thresholds: {
    http_req_failed: ['rate<0.001'],
    orders_sold_out: [`rate>=${env('GOAL', 50000)}`],
    orders_accepted: [`count<=${STOCK}`], // only the sell-out in setup()
    orders_rejected_duration: ['p(95)<20', 'p(99)<50'],
    dropped_iterations: ['count==0'],
  },
};

export function setup() {
  const productId = createProduct('soldout', STOCK, 0);
  let sold = 0;
  for (let i = 0; i < 2 * STOCK; i++) {
    if (order(productId, USER_BASE + (i % USERS) + 1, `${RUN_ID}-so-s${i}`).status === 202) sold++;
  }
  check(sold, { 'sold out in setup': (n) => n === STOCK });
  return { productId };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  const res = order(data.productId, USER_BASE + (i % USERS) + 1, `${RUN_ID}-so-${i}`);
  check(res, { 'sold out': (r) => r.status === 409 });
}
