-- wrk: POST a small JSON command (the bench image's gateway load, docker-compose's bench-gateway).
wrk.method = "POST"
wrk.body = '{"open":true}'
wrk.headers["Content-Type"] = "application/json"
