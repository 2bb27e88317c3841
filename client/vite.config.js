import vue from '@vitejs/plugin-vue'
import { defineConfig } from 'vite'

// The gateway serves dist/ and the API on one origin; in development Vite
// proxies the API to a running stampede (STAMPEDE_URL, default :8080).
const target = process.env.STAMPEDE_URL || 'http://127.0.0.1:8080'

export default defineConfig({
  plugins: [vue()],
  server: {
    proxy: {
      '/api': target,
      '/metrics': target,
    },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    chunkSizeWarningLimit: 600,
  },
  test: {
    include: ['tests/**/*.test.js'],
    environment: 'node',
  },
})
