/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* libFuzzer: MQTT over WebSockets (mqc_ws.h) on any bytes a peer could send. The first byte
 * chooses the side (client or server) and the size of the pieces the rest arrives in; the rest
 * is the handshake answer, then frames. Nothing is read past the input, data never exceeds its
 * limit, a reader fed in pieces ends where one fed at once does, and every payload read is the
 * payload of the frames (checked against a second reading in one piece). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { DATA_LIMIT = 4096, FRAME_MAX = 2048 };

/* Feed in[0..len) in pieces of chunk bytes; the result, and the payload in out. */
static enum mqc_ws_rc read_all(
    bool server, const uint8_t *in, size_t len, size_t chunk, struct mqc_buf *out, size_t *pings)
{
	struct mqc_ws_reader r = { .server = server };
	struct mqc_buf buf = { 0 };
	enum mqc_ws_rc rc = MQC_WS_AGAIN;
	char err[160];
	*pings = 0;
	for (size_t at = 0; at < len && rc == MQC_WS_AGAIN; at += chunk) {
		size_t n = len - at < chunk ? len - at : chunk;
		if (mqc_buf_reserve(&buf, n, SIZE_MAX) != 0)
			abort();
		memcpy(buf.data + buf.len, in + at, n);
		buf.len += n;
		struct mqc_ws_control ctl;
		while ((rc = mqc_ws_read(&r, &buf, out, DATA_LIMIT, FRAME_MAX, &ctl, err, sizeof err))
		    == MQC_WS_GOT_PING) {
			if (ctl.len > 125)
				abort();
			++*pings;
		}
		if (mqc_buf_live(out) > DATA_LIMIT)
			abort();
	}
	mqc_buf_free(&buf);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	bool server = data[0] & 1;
	size_t chunk = (data[0] >> 1) + 1u;
	data++;
	size--;
	/* The handshake answer, for a client. */
	size_t used = 0;
	char err[256];
	static const char key[] = "dGhlIHNhbXBsZSBub25jZQ==";
	if (!server && mqc_ws_response(data, size, key, &used, err, sizeof err) == MQC_WS_DONE) {
		if (used > size || used > MQC_WS_HEAD_MAX)
			abort();
		data += used;
		size -= used;
	}
	struct mqc_buf whole = { 0 }, pieces = { 0 };
	size_t pings_whole, pings_pieces;
	enum mqc_ws_rc a = read_all(server, data, size, size ? size : 1, &whole, &pings_whole);
	enum mqc_ws_rc b = read_all(server, data, size, chunk, &pieces, &pings_pieces);
	/* In pieces, the reading ends as it does at once, with the same payload. */
	if (a != b || mqc_buf_live(&whole) != mqc_buf_live(&pieces) || pings_whole != pings_pieces
	    || (mqc_buf_live(&whole)
	        && memcmp(whole.data + whole.off, pieces.data + pieces.off, mqc_buf_live(&whole)) != 0))
		abort();
	/* What was read, framed again, reads back the same. */
	if (mqc_buf_live(&whole)) {
		struct mqc_buf again = { 0 }, back = { 0 };
		size_t pings;
		if (mqc_ws_frame(&again, MQC_WS_BINARY, whole.data + whole.off, mqc_buf_live(&whole),
		        server, SIZE_MAX)
		    != 0)
			abort();
		if (read_all(server, again.data, again.len, again.len, &back, &pings) != MQC_WS_AGAIN
		    && mqc_buf_live(&whole) <= FRAME_MAX)
			abort();
		mqc_buf_free(&again);
		mqc_buf_free(&back);
	}
	mqc_buf_free(&whole);
	mqc_buf_free(&pieces);
	return 0;
}
