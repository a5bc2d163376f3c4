// The official LoadGen's side of `loadgen-node --engine official`.
//
// The official LoadGen (compiled unaltered from the tree MLPERF_LOADGEN_SRC
// points at) sees one mlperf::QueryDispatchLibrary and one
// mlperf::QuerySampleLibrary; both forward every call to loadgen-node's Rust
// code through the function pointers of `lgn_callbacks`. The Rust QDL calls
// lgn_samples_complete / lgn_first_token_complete from its network threads.

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "loadgen.h"
#include "query_dispatch_library.h"
#include "query_sample.h"
#include "query_sample_library.h"
#include "test_settings.h"
#include "version.h"

extern "C" {

// The layout of mlperf::QuerySample (and of the Rust engine's QuerySample),
// so that IssueQuery hands its vector's storage to Rust as it is.
struct lgn_sample {
  uint64_t id;
  uint64_t index;
};

struct lgn_response {
  uint64_t id;
  const uint8_t* data;
  size_t size;
  int64_t n_tokens;
};

struct lgn_callbacks {
  void* ctx;
  // Computes the SUT name and hands it to `set`, which copies it into `out`.
  void (*sut_name)(void* ctx, void* out,
                   void (*set)(void* out, const char* name, size_t len));
  void (*issue_query)(void* ctx, const lgn_sample* samples, size_t count);
  void (*flush_queries)(void* ctx);
  void (*load_samples)(void* ctx, const size_t* indices, size_t count);
  void (*unload_samples)(void* ctx, const size_t* indices, size_t count);
  const char* qsl_name;
  size_t total_sample_count;
  size_t performance_sample_count;
};

struct lgn_test {
  const char* model;
  // 0 SingleStream, 1 MultiStream, 2 Server, 3 Offline (mlperf::TestScenario).
  int scenario;
  // -1: as the config files say; else mlperf::TestMode.
  int mode;
  // user.conf to apply with FromConfig, or null.
  const char* user_conf;
  const char* audit_config;
  const char* outdir;
  int enable_trace;
  // Non-zero: the SUT is NullSut below, not the QDL (the sut_name,
  // issue_query and flush_queries callbacks are not used).
  int null_sut;
};

}  // extern "C"

static_assert(sizeof(lgn_sample) == sizeof(mlperf::QuerySample),
              "QuerySample layout");
static_assert(sizeof(lgn_response) == sizeof(mlperf::QuerySampleResponse),
              "QuerySampleResponse layout");

namespace {

class RustQdl : public mlperf::QueryDispatchLibrary {
 public:
  explicit RustQdl(const lgn_callbacks* cb) : cb_(cb) {}

  // A real round trip to every sut-node, each time the LoadGen asks.
  const std::string& Name() override {
    cb_->sut_name(cb_->ctx, &name_, [](void* out, const char* name,
                                       size_t len) {
      static_cast<std::string*>(out)->assign(name, len);
    });
    return name_;
  }

  void IssueQuery(const std::vector<mlperf::QuerySample>& samples) override {
    cb_->issue_query(cb_->ctx,
                     reinterpret_cast<const lgn_sample*>(samples.data()),
                     samples.size());
  }

  void FlushQueries() override { cb_->flush_queries(cb_->ctx); }

 private:
  const lgn_callbacks* cb_;
  std::string name_;
};

// Answers every sample at once, on the issuing thread, with an empty
// response: the official LoadGen measured on its own, without a network.
class NullSut : public mlperf::SystemUnderTest {
 public:
  const std::string& Name() override { return name_; }

  void IssueQuery(const std::vector<mlperf::QuerySample>& samples) override {
    // Reused per issuing thread: no allocation per query.
    thread_local std::vector<mlperf::QuerySampleResponse> responses;
    responses.clear();
    for (const auto& s : samples) {
      responses.emplace_back(s.id, 0, 0);
    }
    mlperf::QuerySamplesComplete(responses.data(), responses.size());
  }

  void FlushQueries() override {}

 private:
  std::string name_ = "Null SUT (official LoadGen, in-process)";
};

class RustQsl : public mlperf::QuerySampleLibrary {
 public:
  explicit RustQsl(const lgn_callbacks* cb) : cb_(cb), name_(cb->qsl_name) {}

  const std::string& Name() override { return name_; }
  size_t TotalSampleCount() override { return cb_->total_sample_count; }
  size_t PerformanceSampleCount() override {
    return cb_->performance_sample_count;
  }
  void LoadSamplesToRam(
      const std::vector<mlperf::QuerySampleIndex>& samples) override {
    cb_->load_samples(cb_->ctx, samples.data(), samples.size());
  }
  void UnloadSamplesFromRam(
      const std::vector<mlperf::QuerySampleIndex>& samples) override {
    cb_->unload_samples(cb_->ctx, samples.data(), samples.size());
  }

 private:
  const lgn_callbacks* cb_;
  std::string name_;
};

void copy_error(const std::string& what, char* err, size_t err_len) {
  if (err_len == 0) return;
  size_t n = what.size() < err_len - 1 ? what.size() : err_len - 1;
  std::memcpy(err, what.data(), n);
  err[n] = '\0';
}

}  // namespace

extern "C" {

// Builds the TestSettings as official harnesses do (the LoadGen's own
// mlperf.conf, then FromConfig for the user.conf, then scenario and mode)
// and runs the test. 0 on success; otherwise a message in `err`.
int lgn_start_test(const lgn_callbacks* cb, const lgn_test* t, char* err,
                   size_t err_len) {
  try {
    mlperf::TestSettings settings;
    std::string scenario_name;
    switch (t->scenario) {
      case 0:
        settings.scenario = mlperf::TestScenario::SingleStream;
        scenario_name = "SingleStream";
        break;
      case 1:
        settings.scenario = mlperf::TestScenario::MultiStream;
        scenario_name = "MultiStream";
        break;
      case 2:
        settings.scenario = mlperf::TestScenario::Server;
        scenario_name = "Server";
        break;
      case 3:
        settings.scenario = mlperf::TestScenario::Offline;
        scenario_name = "Offline";
        break;
      default:
        copy_error("unknown scenario", err, err_len);
        return 1;
    }
    // FromConfig with a user.conf first applies the LoadGen's own
    // mlperf.conf; without one, apply mlperf.conf alone the same way.
    int rc = t->user_conf != nullptr
                 ? settings.FromConfig(t->user_conf, t->model, scenario_name, 1)
                 : settings.FromConfig("", t->model, scenario_name, 0);
    if (rc != 0) {
      copy_error(std::string("the official LoadGen refused ") +
                     (t->user_conf ? t->user_conf : "its mlperf.conf") +
                     " (FromConfig returned " + std::to_string(rc) +
                     "; its detail log says why)",
                 err, err_len);
      return 1;
    }
    if (t->mode >= 0) {
      settings.mode = static_cast<mlperf::TestMode>(t->mode);
    }
    mlperf::LogSettings log_settings;
    log_settings.log_output.outdir = t->outdir;
    log_settings.enable_trace = t->enable_trace != 0;

    RustQdl qdl(cb);
    NullSut null_sut;
    mlperf::SystemUnderTest* sut = &qdl;
    if (t->null_sut != 0) sut = &null_sut;
    RustQsl qsl(cb);
    mlperf::StartTest(sut, &qsl, settings, log_settings, t->audit_config);
    return 0;
  } catch (const std::exception& e) {
    copy_error(std::string("the official LoadGen threw: ") + e.what(), err,
               err_len);
    return 1;
  } catch (...) {
    copy_error("the official LoadGen threw an unknown exception", err,
               err_len);
    return 1;
  }
}

void lgn_samples_complete(const lgn_response* responses, size_t count) {
  // QuerySamplesComplete does not write to the responses.
  mlperf::QuerySamplesComplete(
      reinterpret_cast<mlperf::QuerySampleResponse*>(
          const_cast<lgn_response*>(responses)),
      count);
}

void lgn_first_token_complete(const lgn_response* responses, size_t count) {
  mlperf::FirstTokenComplete(reinterpret_cast<mlperf::QuerySampleResponse*>(
                                 const_cast<lgn_response*>(responses)),
                             count);
}

const char* lgn_loadgen_version() { return mlperf::LoadgenVersion().c_str(); }

}  // extern "C"
