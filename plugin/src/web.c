/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * web.c - plugin_opt_web_config: the part of the Prometheus exporter-toolkit's web configuration
 * file that secures a metrics endpoint. Read with libyaml; every error names the file's line.
 *
 *   tls_server_config:
 *     cert_file: server.crt          # paths relative to the file's own directory
 *     key_file: server.key
 *     client_ca_file: ca.crt         # with client_auth_type RequireAndVerifyClientCert
 *     client_auth_type: RequireAndVerifyClientCert
 *     min_version: TLS12             # TLS12 (the default) or TLS13
 *   basic_auth_users:
 *     prometheus: $2b$10$...         # bcrypt, checked with libxcrypt's crypt_rn()
 *   http_server_config:
 *     http2: true                    # accepted and ignored (libmicrohttpd speaks HTTP/1.1)
 *
 * The toolkit's other keys (cipher_suites, curve_preferences, max_version, client_allowed_sans,
 * headers, the other client_auth_types) are refused by name rather than ignored: a setting an
 * operator wrote and the probe silently dropped would be a hole nobody sees.
 */
#define _GNU_SOURCE
#include <crypt.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "probe.h"

enum { FILE_MAX = 1 << 20 }; /* a certificate chain or a CA bundle: 1 MiB is plenty */

struct parse {
	const char *path;
	char dir[PATH_MAX];
	char *err;
	size_t errlen;
	yaml_document_t doc;
};

static int fail(struct parse *p, const yaml_node_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parse *p, const yaml_node_t *at, const char *fmt, ...)
{
	char what[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (at)
		snprintf(p->err, p->errlen, "web_config %s, line %zu: %s", p->path, at->start_mark.line + 1,
		    what);
	else
		snprintf(p->err, p->errlen, "web_config %s: %s", p->path, what);
	return -1;
}

/* YAML leaves a key given twice to the reader: here it is an error, not "the last one wins". */
static int once(
    struct parse *p, const yaml_node_t *key, const char *section, unsigned *seen, unsigned bit)
{
	if (*seen & bit)
		return fail(p, key, "%s%s%s is given twice", section, *section ? ": " : "",
		    (const char *)key->data.scalar.value);
	*seen |= bit;
	return 0;
}

static const char *scalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* An empty value (key: with nothing after it) is YAML's null, a scalar "" or "~" or "null". */
static bool is_null(const yaml_node_t *n)
{
	const char *s = scalar(n);
	return s && (!*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0)
	    && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* The whole file at path, NUL-terminated, or NULL with errno set. */
static char *slurp(const char *path, size_t *len_out)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *data = malloc(FILE_MAX + 1);
	size_t len = data ? fread(data, 1, FILE_MAX + 1, f) : 0;
	int e = ferror(f) ? EIO : 0;
	fclose(f);
	if (!data || e || len > FILE_MAX) {
		free(data);
		errno = !data ? ENOMEM : e ? e : EFBIG;
		return NULL;
	}
	data[len] = '\0';
	if (len_out)
		*len_out = len;
	return data;
}

/* key: a file path, resolved against the config's directory, read whole into *pem. */
static int read_file_value(struct parse *p, const yaml_node_t *key, const yaml_node_t *value,
    char (*path)[PATH_MAX], char **pem)
{
	const char *name = scalar(key), *v = scalar(value);
	if (!v || !*v)
		return fail(p, value, "%s: expected a file path", name);
	int n = v[0] == '/' ? snprintf(*path, sizeof *path, "%s", v)
	                    : snprintf(*path, sizeof *path, "%s/%s", p->dir, v);
	if (n < 0 || (size_t)n >= sizeof *path)
		return fail(p, value, "%s: path too long", name);
	free(*pem);
	*pem = slurp(*path, NULL);
	if (!*pem)
		return fail(p, value, "%s: cannot read %s: %s", name, *path, strerror(errno));
	return 0;
}

/* GnuTLS (libmicrohttpd's TLS) takes the certificate, key and CA now, or says why not: at load,
 * not as a server that fails to start with no reason given. */
static int check_tls_files(struct parse *p, const yaml_node_t *at, const struct probe_web *w)
{
	gnutls_certificate_credentials_t cred;
	if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
		return fail(p, NULL, "out of memory");
	gnutls_datum_t cert = { (unsigned char *)w->cert_pem, (unsigned)strlen(w->cert_pem) };
	gnutls_datum_t key = { (unsigned char *)w->key_pem, (unsigned)strlen(w->key_pem) };
	int rc = gnutls_certificate_set_x509_key_mem(cred, &cert, &key, GNUTLS_X509_FMT_PEM);
	if (rc < 0) {
		gnutls_certificate_free_credentials(cred);
		return fail(p, at, "cert_file %s with key_file %s: %s", w->cert_file, w->key_file,
		    gnutls_strerror(rc));
	}
	if (w->ca_pem) {
		gnutls_datum_t ca = { (unsigned char *)w->ca_pem, (unsigned)strlen(w->ca_pem) };
		rc = gnutls_certificate_set_x509_trust_mem(cred, &ca, GNUTLS_X509_FMT_PEM);
		if (rc <= 0) {
			gnutls_certificate_free_credentials(cred);
			return fail(p, at, "client_ca_file %s: %s", w->client_ca_file,
			    rc == 0 ? "no PEM certificate in it" : gnutls_strerror(rc));
		}
	}
	gnutls_certificate_free_credentials(cred);
	return 0;
}

static int parse_tls(struct parse *p, const yaml_node_t *map, struct probe_web *w)
{
	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(p, map, "tls_server_config: expected a mapping");
	const yaml_node_t *auth_at = map, *ca_at = map;
	const char *auth = NULL;
	unsigned seen = 0;
	static const char *const keys[]
	    = { "cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version" };
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		const yaml_node_t *k = yaml_document_get_node(&p->doc, pr->key);
		const yaml_node_t *v = yaml_document_get_node(&p->doc, pr->value);
		const char *name = scalar(k);
		if (!name)
			return fail(p, k, "tls_server_config: expected a key");
		for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
			if (strcmp(name, keys[i]) == 0 && once(p, k, "tls_server_config", &seen, 1u << i) != 0)
				return -1;
		if (strcmp(name, "cert_file") == 0) {
			if (read_file_value(p, k, v, &w->cert_file, &w->cert_pem) != 0)
				return -1;
		} else if (strcmp(name, "key_file") == 0) {
			if (read_file_value(p, k, v, &w->key_file, &w->key_pem) != 0)
				return -1;
		} else if (strcmp(name, "client_ca_file") == 0) {
			ca_at = v;
			if (read_file_value(p, k, v, &w->client_ca_file, &w->ca_pem) != 0)
				return -1;
		} else if (strcmp(name, "client_auth_type") == 0) {
			auth = scalar(v);
			auth_at = v;
			if (!auth)
				return fail(p, v, "client_auth_type: expected a name");
		} else if (strcmp(name, "min_version") == 0) {
			const char *m = scalar(v);
			if (m && strcmp(m, "TLS12") == 0)
				w->min_tls13 = false;
			else if (m && strcmp(m, "TLS13") == 0)
				w->min_tls13 = true;
			else
				return fail(p, v,
				    "min_version '%s': expected TLS12 or TLS13 (the probe offers "
				    "nothing older)",
				    m ? m : "");
		} else if (strcmp(name, "cipher_suites") == 0 || strcmp(name, "curve_preferences") == 0
		    || strcmp(name, "max_version") == 0 || strcmp(name, "client_allowed_sans") == 0
		    || strcmp(name, "prefer_server_cipher_suites") == 0 || strcmp(name, "cert") == 0
		    || strcmp(name, "key") == 0) {
			return fail(p, k,
			    "tls_server_config: %s is not supported by mqtt_probe (it reads "
			    "cert_file, key_file, client_ca_file, client_auth_type, min_version)",
			    name);
		} else {
			return fail(p, k, "tls_server_config: unknown key %s", name);
		}
	}
	if (!w->cert_pem && !w->key_pem && !w->ca_pem && !auth)
		return 0; /* as the toolkit: an empty section is no TLS */
	if (!w->cert_pem)
		return fail(p, map, "tls_server_config: cert_file is missing");
	if (!w->key_pem)
		return fail(p, map, "tls_server_config: key_file is missing");
	w->tls = true;
	if (check_tls_files(p, map, w) != 0)
		return -1;
	if (!auth || strcmp(auth, "NoClientCert") == 0)
		w->client_cert = PROBE_WEB_NO_CLIENT_CERT;
	else if (strcmp(auth, "RequireAndVerifyClientCert") == 0)
		w->client_cert = PROBE_WEB_REQUIRE_CLIENT_CERT;
	else if (strcmp(auth, "VerifyClientCertIfGiven") == 0)
		w->client_cert = PROBE_WEB_VERIFY_CLIENT_CERT_IF_GIVEN;
	else
		return fail(p, auth_at,
		    "client_auth_type '%s': mqtt_probe supports NoClientCert, VerifyClientCertIfGiven "
		    "and RequireAndVerifyClientCert",
		    auth);
	if (w->client_cert != PROBE_WEB_NO_CLIENT_CERT && !w->ca_pem)
		return fail(p, auth_at, "client_auth_type %s needs client_ca_file", auth);
	if (w->client_cert == PROBE_WEB_NO_CLIENT_CERT && w->ca_pem)
		return fail(p, ca_at,
		    "client_ca_file is set but client_auth_type is NoClientCert: "
		    "say RequireAndVerifyClientCert or VerifyClientCertIfGiven");
	return 0;
}

/* $2a$, $2b$ or $2y$, a two-digit cost from 04 to 31, 53 characters of bcrypt's base 64. */
static bool bcrypt_hash(const char *h)
{
	static const char b64[] = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	if (strlen(h) != 60 || h[0] != '$' || h[1] != '2' || !strchr("aby", h[2]) || h[3] != '$'
	    || h[6] != '$' || h[4] < '0' || h[4] > '3' || h[5] < '0' || h[5] > '9')
		return false;
	int cost = (h[4] - '0') * 10 + (h[5] - '0');
	return cost >= 4 && cost <= 31 && strspn(h + 7, b64) == 53;
}

static int parse_users(struct parse *p, const yaml_node_t *map, struct probe_web *w)
{
	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(p, map, "basic_auth_users: expected a mapping of user names to bcrypt hashes");
	size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
	if (n > PROBE_WEB_USERS_MAX)
		return fail(p, map, "basic_auth_users: %zu users, at most %d", n, PROBE_WEB_USERS_MAX);
	w->users = calloc(n ? n : 1, sizeof *w->users);
	if (!w->users)
		return fail(p, NULL, "out of memory");
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		const yaml_node_t *k = yaml_document_get_node(&p->doc, pr->key);
		const yaml_node_t *v = yaml_document_get_node(&p->doc, pr->value);
		const char *name = scalar(k), *hash = scalar(v);
		if (!name || !*name || strlen(name) >= sizeof w->users[0].name || strchr(name, ':'))
			return fail(p, k, "basic_auth_users: a user name is 1 to %zu bytes without ':'",
			    sizeof w->users[0].name - 1);
		for (unsigned i = 0; i < w->nusers; i++)
			if (strcmp(w->users[i].name, name) == 0)
				return fail(p, k, "basic_auth_users: %s is listed twice", name);
		if (!hash || !bcrypt_hash(hash))
			return fail(p, v,
			    "basic_auth_users: %s: not a bcrypt hash ($2a$, $2b$ or $2y$, 60 characters; "
			    "mqtt-probe-passwd makes one)",
			    name);
		memcpy(w->users[w->nusers].name, name, strlen(name) + 1);
		memcpy(w->users[w->nusers].hash, hash, 61);
		w->nusers++;
	}
	return 0;
}

static int parse_http(struct parse *p, const yaml_node_t *map)
{
	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(p, map, "http_server_config: expected a mapping");
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		const yaml_node_t *k = yaml_document_get_node(&p->doc, pr->key);
		const yaml_node_t *v = yaml_document_get_node(&p->doc, pr->value);
		const char *name = scalar(k), *value = scalar(v);
		if (name && strcmp(name, "http2") == 0) {
			if (!value || (strcmp(value, "true") != 0 && strcmp(value, "false") != 0))
				return fail(p, v, "http2: expected true or false");
		} else {
			return fail(p, k, "http_server_config: %s is not supported by mqtt_probe (only http2)",
			    name ? name : "?");
		}
	}
	return 0;
}

static int parse_document(struct parse *p, struct probe_web *w)
{
	yaml_node_t *root = yaml_document_get_root_node(&p->doc);
	if (!root || is_null(root))
		return 0; /* an empty file: no TLS, no users, as the toolkit reads it */
	if (root->type != YAML_MAPPING_NODE)
		return fail(p, root,
		    "expected a mapping (tls_server_config, basic_auth_users, "
		    "http_server_config)");
	unsigned seen = 0;
	for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top;
	     pr++) {
		const yaml_node_t *k = yaml_document_get_node(&p->doc, pr->key);
		const yaml_node_t *v = yaml_document_get_node(&p->doc, pr->value);
		const char *name = scalar(k);
		int rc;
		if (name && strcmp(name, "tls_server_config") == 0)
			rc = once(p, k, "", &seen, 1) ? -1 : parse_tls(p, v, w);
		else if (name && strcmp(name, "basic_auth_users") == 0)
			rc = once(p, k, "", &seen, 2) ? -1 : parse_users(p, v, w);
		else if (name && strcmp(name, "http_server_config") == 0)
			rc = once(p, k, "", &seen, 4) ? -1 : parse_http(p, v);
		else
			rc = fail(p, k,
			    "unknown key %s (known: tls_server_config, basic_auth_users, "
			    "http_server_config)",
			    name ? name : "?");
		if (rc != 0)
			return -1;
	}
	return 0;
}

struct probe_web *probe_web__load(const char *path, char *err, size_t errlen)
{
	struct parse p = { .path = path, .err = err, .errlen = errlen };
	struct probe_web *w = calloc(1, sizeof *w);
	size_t len;
	char *text = w ? slurp(path, &len) : NULL;
	if (!w || !text) {
		fail(&p, NULL, "cannot read it: %s", strerror(w ? errno : ENOMEM));
		free(w);
		return NULL;
	}
	snprintf(w->path, sizeof w->path, "%s", path);
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(p.dir, sizeof p.dir, ".");
	else
		snprintf(p.dir, sizeof p.dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);

	yaml_parser_t parser;
	int rc = -1;
	if (!yaml_parser_initialize(&parser)) {
		fail(&p, NULL, "out of memory");
		goto out_text;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &p.doc)) {
		snprintf(err, errlen, "web_config %s, line %zu: %s%s%s", path, parser.problem_mark.line + 1,
		    parser.problem ? parser.problem : "not YAML", parser.context ? " " : "",
		    parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		goto out_text;
	}
	rc = parse_document(&p, w);
	yaml_document_delete(&p.doc);
	yaml_parser_delete(&parser);
out_text:
	free(text);
	if (rc != 0) {
		probe_web__free(w);
		return NULL;
	}
	probe_web__stamp(w, &w->stamp);
	return w;
}

void probe_web__free(struct probe_web *w)
{
	if (!w)
		return;
	free(w->cert_pem);
	if (w->key_pem)
		explicit_bzero(w->key_pem, strlen(w->key_pem));
	free(w->key_pem);
	free(w->ca_pem);
	free(w->users);
	free(w);
}

bool probe_web__requires_auth(const struct probe_web *w)
{
	return w && (w->nusers > 0 || w->client_cert == PROBE_WEB_REQUIRE_CLIENT_CERT);
}

static void stamp_one(const char *path, struct probe_web_file_stamp *s)
{
	struct stat st;
	*s = (struct probe_web_file_stamp) { 0 };
	if (!path[0])
		return;
	if (stat(path, &st) != 0) {
		s->error = errno;
		return;
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	s->size = st.st_size;
	s->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

void probe_web__stamp(const struct probe_web *w, struct probe_web_stamp *s)
{
	stamp_one(w->path, &s->file[0]);
	stamp_one(w->cert_file, &s->file[1]);
	stamp_one(w->key_file, &s->file[2]);
	stamp_one(w->client_ca_file, &s->file[3]);
}

bool probe_web__same_stamp(const struct probe_web_stamp *a, const struct probe_web_stamp *b)
{
	for (size_t i = 0; i < sizeof a->file / sizeof a->file[0]; i++) {
		const struct probe_web_file_stamp *x = &a->file[i], *y = &b->file[i];
		if (x->dev != y->dev || x->ino != y->ino || x->size != y->size || x->mtime_ns != y->mtime_ns
		    || x->error != y->error)
			return false;
	}
	return true;
}

/* Compare without leaving early: how much of a name or hash matched must not show in the time. */
static bool same_secret(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = la != lb;
	for (size_t i = 0; i < lb; i++)
		diff |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
	return diff == 0;
}

bool probe_web__check_password(
    const struct probe_web *w, const char *user, const char *password, const char **hash_out)
{
	if (w->nusers == 0)
		return false;
	/* An unknown user costs the same bcrypt as a known one (against the first user's hash,
	 * and fails): the time does not tell whether the name exists. */
	const char *hash = w->users[0].hash;
	bool known = false;
	for (unsigned i = 0; i < w->nusers; i++) {
		bool match = same_secret(user, w->users[i].name);
		hash = match ? w->users[i].hash : hash;
		known |= match;
	}
	struct crypt_data *cd = calloc(1, sizeof *cd); /* 32 KiB: not on the HTTP thread's stack */
	if (!cd)
		return false;
	const char *out = crypt_rn(password, hash, cd, (int)sizeof *cd);
	bool ok = out && out[0] != '*' && same_secret(out, hash) && known;
	explicit_bzero(cd, sizeof *cd);
	free(cd);
	if (hash_out)
		*hash_out = known ? hash : NULL;
	return ok;
}

const char *probe_web__user_hash(const struct probe_web *w, const char *user)
{
	for (unsigned i = 0; i < w->nusers; i++)
		if (strcmp(w->users[i].name, user) == 0)
			return w->users[i].hash;
	return NULL;
}
