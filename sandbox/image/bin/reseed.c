// OpenSSL's random generator reseeded from the kernel, for a worker that may be a restored
// clone of a template (fresh-random.cjs): RAND_add mixes fresh bytes into OpenSSL's primary
// generator and reseeds it, and every thread's own generator reseeds from it at its next draw.
//
// A Node-API module with no headers: the few declarations it uses are written here (the
// Node-API ABI is stable), and node itself provides RAND_add and the napi_* functions when it
// loads the module. Built at image build: cc -shared -fPIC -O2 reseed.c -o reseed.node
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/random.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef napi_value (*napi_callback)(napi_env env, napi_callback_info info);

int napi_create_function(napi_env env, const char *name, size_t length, napi_callback cb,
                         void *data, napi_value *result);
int napi_set_named_property(napi_env env, napi_value object, const char *name, napi_value value);
int napi_get_boolean(napi_env env, bool value, napi_value *result);
void RAND_add(const void *buf, int num, double randomness);

static napi_value reseed(napi_env env, napi_callback_info info) {
  (void)info;
  unsigned char seed[48];
  bool done = getrandom(seed, sizeof seed, 0) == (ssize_t)sizeof seed;
  if (done) RAND_add(seed, sizeof seed, (double)sizeof seed);
  napi_value result;
  napi_get_boolean(env, done, &result);
  return result;
}

napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  napi_value function;
  napi_create_function(env, "reseed", SIZE_MAX, reseed, NULL, &function);
  napi_set_named_property(env, exports, "reseed", function);
  return exports;
}

int32_t node_api_module_get_api_version_v1(void) { return 8; }
