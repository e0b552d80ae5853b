-- SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
-- wrk: POST a small JSON command (the bench image's gateway load, docker-compose's bench-gateway).
wrk.method = "POST"
wrk.body = '{"open":true}'
wrk.headers["Content-Type"] = "application/json"
