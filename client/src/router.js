import { createRouter, createWebHistory } from 'vue-router'
import { session } from './lib/session.js'
import AdminPage from './pages/AdminPage.vue'
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
    { path: '/orders', name: 'orders', component: OrdersPage, meta: { auth: true } },
    { path: '/orders/:orderNo(\\d+)', name: 'order', component: OrderPage, props: true, meta: { auth: true } },
    { path: '/login', name: 'login', component: LoginPage },
    { path: '/admin', name: 'admin', component: AdminPage },
    { path: '/:rest(.*)*', redirect: '/' },
  ],
  scrollBehavior: () => ({ top: 0 }),
})

router.beforeEach((to) => {
  if (to.meta.auth && !session.signedIn) return { name: 'login', query: { next: to.fullPath } }
  return true
})
