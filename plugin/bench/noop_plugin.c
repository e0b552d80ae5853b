/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * noop_plugin.c - a mosquitto plugin that registers the events the probe's default mode does
 * (MESSAGE, DISCONNECT, TICK) and does nothing in them: probe_overhead's floor, what having a
 * plugin on those events costs the broker before the plugin does any work of its own. With
 * plugin_opt_thread true it also starts a thread that only waits (as the probe's HTTP thread
 * did between scrapes, before it moved to a process of its own): what a second thread in the
 * broker's process costs it.
 */
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#define NOOP_EXPORT __attribute__((visibility("default")))

static mosquitto_plugin_id_t *plugin_id;
static const int noop_events[] = { MOSQ_EVT_MESSAGE, MOSQ_EVT_DISCONNECT, MOSQ_EVT_TICK };

static pthread_t waiter;
static bool waiting;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool stopping;

static void *wait_only(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	while (!stopping)
		pthread_cond_wait(&wake, &lock);
	pthread_mutex_unlock(&lock);
	return NULL;
}

static int nothing(int event, void *event_data, void *userdata)
{
	(void)event;
	(void)event_data;
	(void)userdata;
	return MOSQ_ERR_SUCCESS;
}

NOOP_EXPORT int mosquitto_plugin_version(int count, const int *versions);
NOOP_EXPORT int mosquitto_plugin_init(
    mosquitto_plugin_id_t *id, void **userdata, struct mosquitto_opt *options, int count);
NOOP_EXPORT int mosquitto_plugin_cleanup(void *userdata, struct mosquitto_opt *options, int count);

int mosquitto_plugin_version(int count, const int *versions)
{
	for (int i = 0; i < count; i++)
		if (versions[i] == 5)
			return 5;
	return -1;
}

int mosquitto_plugin_init(
    mosquitto_plugin_id_t *id, void **userdata, struct mosquitto_opt *options, int count)
{
	(void)userdata;
	plugin_id = id;
	for (int i = 0; i < count; i++)
		if (strcmp(options[i].key, "thread") == 0 && strcmp(options[i].value, "true") == 0)
			waiting = pthread_create(&waiter, NULL, wait_only, NULL) == 0;
	for (size_t i = 0; i < sizeof noop_events / sizeof noop_events[0]; i++)
		if (mosquitto_callback_register(id, noop_events[i], nothing, NULL, NULL)
		    != MOSQ_ERR_SUCCESS)
			return MOSQ_ERR_UNKNOWN;
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_plugin_cleanup(void *userdata, struct mosquitto_opt *options, int count)
{
	(void)userdata;
	(void)options;
	(void)count;
	for (size_t i = 0; i < sizeof noop_events / sizeof noop_events[0]; i++)
		mosquitto_callback_unregister(plugin_id, noop_events[i], nothing, NULL);
	if (waiting) {
		pthread_mutex_lock(&lock);
		stopping = true;
		pthread_cond_signal(&wake);
		pthread_mutex_unlock(&lock);
		pthread_join(waiter, NULL);
		waiting = false;
	}
	return MOSQ_ERR_SUCCESS;
}
