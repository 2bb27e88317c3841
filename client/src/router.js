import { createRouter, createWebHistory } from 'vue-router'
import { session } from './lib/session.js'
import LoginPage from './pages/LoginPage.vue'
import OrderPage from './pages/OrderPage.vue'
import OrdersPage from './pages/OrdersPage.vue'
import ProductPage from './pages/ProductPage.vue'
import StorefrontPage from './pages/StorefrontPage.vue'

export const router = createRouter({
  history: createWebHistory(),
  routes: [
    { path: '/', name: 'shop', component: StorefrontPage },
    { path: '/products/:id(\\d+)', name: 'product', component: ProductPage, props: true },
    // A fair drop's check (issue 28), its own chunk with the SHA-256 code.
    { path: '/products/:id(\\d+)/verify', name: 'verify', component: () => import('./pages/VerifyPage.vue'), props: true },
    { path: '/orders', name: 'orders', component: OrdersPage, meta: { auth: true } },
    { path: '/orders/:orderNo(\\d+)', name: 'order', component: OrderPage, props: true, meta: { auth: true } },
    { path: '/login', name: 'login', component: LoginPage },
    // The console is its own chunk: buyers never download it.
    { path: '/admin', name: 'admin', component: () => import('./pages/AdminPage.vue'), meta: { admin: true } },
    { path: '/:rest(.*)*', redirect: '/' },
  ],
  scrollBehavior: () => ({ top: 0 }),
})

// The operator console is for admins only: a signed-out visitor is sent to
// sign in, a buyer back to the shop with a notice. (The token's role is only
// read here to route; every admin endpoint checks it again.)
router.beforeEach((to) => {
  if ((to.meta.auth || to.meta.admin) && !session.signedIn) return { name: 'login', query: { next: to.fullPath } }
  if (to.meta.admin && !session.admin) return { name: 'shop', query: { denied: 'admin' } }
  return true
})
