import { createApp } from 'vue'
import App from './App.vue'
import { router } from './router.js'
import { startLive } from './lib/store.js'
import './style.css'

startLive()
createApp(App).use(router).mount('#app')
