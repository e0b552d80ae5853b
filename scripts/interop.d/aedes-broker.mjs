// SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
// aedes (the broker the JavaScript mqtt-pool benchmarks against; MQTT 3.1.1 only) on a loopback
// port for scripts/interop: prints AEDES_URL=mqtt://127.0.0.1:PORT once it listens, stops on
// SIGTERM. Usage: node aedes-broker.mjs [PORT]   (0 or none: a free port)
import { Aedes } from 'aedes'
import { createServer } from 'node:net'

const aedes = await Aedes.createBroker()
const server = createServer(aedes.handle)
server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`AEDES_URL=mqtt://127.0.0.1:${server.address().port}`)
})
process.on('SIGTERM', () => {
  server.close()
  aedes.close(() => process.exit(0))
})
