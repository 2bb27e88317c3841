import { createApp } from 'vue'
import App from './App.vue'
import { router } from './router.js'
import { loadConfig } from './lib/shop.js'
import { startLive } from './lib/store.js'
import './style.css'

loadConfig().catch(() => {}) // currency and push URL; the defaults serve until it answers
startLive()
createApp(App).use(router).mount('#app')
