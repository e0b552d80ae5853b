// SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
// aedes (the broker the JavaScript mqtt-pool benchmarks against; MQTT 3.1.1 only) on loopback
// ports for scripts/interop: prints AEDES_URL=mqtt://127.0.0.1:PORT and, over WebSockets as
// aedes' README serves them (the ws package's stream handed to aedes.handle),
// AEDES_WS_URL=ws://127.0.0.1:PORT/mqtt once both listen; stops on SIGTERM.
// Usage: node aedes-broker.mjs [PORT [WS_PORT]]   (0 or none: free ports)
import { Aedes } from 'aedes'
import { createServer } from 'node:net'
import { createServer as createHttpServer } from 'node:http'
import { WebSocketServer, createWebSocketStream } from 'ws'

const aedes = await Aedes.createBroker()
const server = createServer(aedes.handle)
const http = createHttpServer()
const wss = new WebSocketServer({ server: http, path: '/mqtt' })
wss.on('connection', (socket) => aedes.handle(createWebSocketStream(socket)))
let listening = 0
const ready = () => {
  if (++listening < 2) return
  console.log(`AEDES_URL=mqtt://127.0.0.1:${server.address().port}`)
  console.log(`AEDES_WS_URL=ws://127.0.0.1:${http.address().port}/mqtt`)
}
server.listen(Number(process.argv[2] || 0), '127.0.0.1', ready)
http.listen(Number(process.argv[3] || 0), '127.0.0.1', ready)
process.on('SIGTERM', () => {
  server.close()
  http.close()
  aedes.close(() => process.exit(0))
})
