// Sustained intake: a product with STOCK units (default 10,000,000) and the
// arrival rate stepped through RATES (requests/s, STEP seconds each). The
// run aborts once p99 passes P99_MS (default 50) or errors appear; the last
// step reached before that is the accepted intake.
//
// k6 evaluates thresholds over the whole run so far, not per step: the Go
// benchmark (`stampede bench --scenarios sustained`) reports each step apart.
import exec from 'k6/execution';
import { RUN_ID, USER_BASE, createProduct, env, order } from './lib.js';

const RATES = (__ENV.RATES || '2000,4000,8000,12000,16000,20000,24000,28000,32000').split(',').map(Number);
const STEP = env('STEP', 5);
const USERS = env('USERS', 100000);
const P99 = env('P99_MS', 50);

const stages = [];
for (const r of RATES) {
  stages.push({ target: r, duration: '1s' }); // ramp to the step
  stages.push({ target: r, duration: `${STEP}s` }); // hold it
}

export const options = {
  scenarios: {
    sustained: {
      executor: 'ramping-arrival-rate',
      startRate: RATES[0],
      timeUnit: '1s',
      stages,
      preAllocatedVUs: env('VUS', 1000),
      maxVUs: env('MAX_VUS', 5000),
    },
  },
  thresholds: {
    http_req_failed: [{ threshold: 'rate<0.001', abortOnFail: true, delayAbortEval: '2s' }],
    'http_req_duration{name:POST /api/orders}': [
      'p(95)<25',
      { threshold: `p(99)<${P99}`, abortOnFail: true, delayAbortEval: '5s' },
    ],
    orders_sold_out: ['count==0'],
    orders_other: ['count==0'],
  },
};

export function setup() {
  return { productId: createProduct('sustained', env('STOCK', 10000000), 0) };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  order(data.productId, USER_BASE + (i % USERS) + 1, `${RUN_ID}-su-${i}`);
}
