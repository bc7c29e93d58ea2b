// `recommend serve`: the runs report and the recommender's suggestions over HTTP (Debian's
// cpp-httplib). Read-only: every request re-reads the runs directory, nothing is written.
// Binds 127.0.0.1 unless --host says otherwise; then only requests whose Host header names the
// loopback are answered, so a web page cannot reach the server through DNS rebinding.
// SIGINT and SIGTERM stop it cleanly (in-flight requests finish; exit 0).
#include <arpa/inet.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/check.h"
#include "core/cli.h"
#include "recommend/commands.h"
#include "recommend/report.h"
#include "recommend/serve.h"

namespace mpicnn::recommend {

namespace {

namespace fs = std::filesystem;

const cli::Program& program() {
  static const cli::Program p{"./recommend serve", {
      {"runs", "", "DIR", cli::Kind::Value,
       "the runs to serve: a run directory or a folder of them (a sweep's -o DIR); re-read on "
       "every request, so new runs appear"},
      {"recommender", "r", "FILE", cli::Kind::Value,
       "a model written by `recommend fit -o FILE`: enables /suggest and /api/suggest (503 "
       "without it) and the report's predicted vs measured chart"},
      {"host", "", "ADDR", cli::Kind::Value,
       "address to listen on; the default 127.0.0.1 serves this machine only. Another address "
       "(0.0.0.0: every interface) exposes the runs and the server to the network: there is no "
       "authentication and no TLS"},
      {"port", "p", "N", cli::Kind::Value, "TCP port (0 = any free port; the line printed says which)"},
      {"help", "h", "", cli::Kind::Help, "print this help and exit"},
  }, "the runs are --runs DIR"};
  return p;
}

constexpr const char* kRoutes = R"HELP(
Prints "serving http://HOST:PORT/ (runs: DIR, model: FILE)" once it listens. Routes (GET):
  /              the runs report (as `recommend report` writes it; 500 with the reason when
                 the runs cannot be read)
  /suggest       a form: model, data, target top-1, max ranks and nodes; submitted, it
                 answers the ranked configurations as an HTML table
  /api/suggest   the same as JSON: /api/suggest?model=lenet&data=synthetic&target_top1=0.8
                 &max_ranks=4&max_nodes=1&top=5 (also max_epochs, device=cpu|cuda);
                 {"query": {...}, "suggestions": [{"config", "seconds_per_epoch",
                 "seconds_sd", "epochs_to_target", "top1_at_target", "top1_sd",
                 "seconds_to_target", "core_hours"}...]}
  /api/runs      the runs as JSON (name, status, configuration, seconds per epoch, top-1)
  /healthz       "ok"
A bad query value gets HTTP 400 with one line naming the parameter (checked first); an
unknown path 404; the suggest routes without -r 503. SIGINT or SIGTERM stops the server (exit 0).
)HELP";

struct ServeOptions {
  std::string runs, recommender, host = "127.0.0.1";
  int port = 8470;
};

// nullopt: -h was given and the help printed.
std::optional<ServeOptions> parse_options(int argc, char** argv) {
  const auto vm = cli::parse_command_line(program(), std::vector<std::string>(argv + 1, argv + argc));
  ServeOptions o;
  if (vm.count("help")) {
    std::cout << "Usage: ./recommend serve --runs DIR [-r MODEL.json] [--host ADDR] [--port N]\n\n"
              << "Serves the runs report and the recommender's suggestions over HTTP.\n\nOptions:\n"
              << cli::format_options(program(), {{"host", o.host}, {"port", std::to_string(o.port)}})
              << kRoutes;
    return std::nullopt;
  }
  auto get = [&](const char* key) { return vm.count(key) ? vm[key].as<std::string>() : std::string(); };
  auto flag = [](const char* key) { return cli::flag_name(cli::find_option(program(), key)); };
  o.runs = get("runs");
  CHECK(!o.runs.empty(), "--runs DIR is required (a run directory or a folder of them)");
  std::error_code ec;
  CHECK(fs::is_directory(o.runs, ec), flag("runs"), ": '", o.runs, "' is not a directory");
  o.recommender = get("recommender");
  if (vm.count("host")) o.host = get("host");
  CHECK(!o.host.empty(), flag("host"), ": empty address");
  if (vm.count("port")) o.port = int(cli::to_int(cli::Given{get("port"), flag("port")}, 0, 65535));
  return o;
}

struct State {
  ServeOptions options;
  std::unique_ptr<Recommender> recommender;
  // One prediction at a time: the boosters' thread safety is not promised, and one suggestion
  // request already uses the cores it may.
  std::mutex model_mutex;
};

void text(httplib::Response& res, int status, const std::string& reason) {
  res.status = status;
  res.set_content(one_line(reason) + "\n", "text/plain; charset=utf-8");
}

// A handler's Errors and other exceptions become one-line answers instead of httplib's empty 500.
template <typename F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const Error& e) {
      text(res, 500, e.message());
    } catch (const std::exception& e) {
      text(res, 500, e.what());
    }
  };
}

void get_report(State& s, httplib::Response& res) {
  std::string html;
  try {
    const std::vector<RunRecord> runs = load_runs({s.options.runs});
    ReportOptions ro;
    ro.title = "mpicnn runs: " + s.options.runs;
    std::lock_guard<std::mutex> lock(s.model_mutex);
    ro.recommender = s.recommender.get();
    html = render_report(runs, ro);
  } catch (const Error& e) {
    return text(res, 500, "report: " + e.message());
  }
  res.set_content(html, "text/html; charset=utf-8");
}

// The query parameters are checked before whether a recommender is loaded: a malformed
// request is the client's 400 either way, and the checks are then testable without a model.
bool parse_request(const httplib::Request& req, SuggestQuery& q, std::string& error) {
  try {
    q = parse_suggest_query(QueryParams(req.params.begin(), req.params.end()));
    return true;
  } catch (const Error& e) {
    error = e.message();
    return false;
  }
}

// suggest()'s own Errors name the query field (a data path that does not exist), so they are
// the client's 400 as well.
bool run_suggest(State& s, const SuggestQuery& q, std::vector<Suggestion>& out, std::string& error) {
  try {
    std::lock_guard<std::mutex> lock(s.model_mutex);
    out = suggest(*s.recommender, q);
    return true;
  } catch (const Error& e) {
    error = e.message();
    return false;
  }
}

constexpr const char* kNoModel =
    "no recommender loaded: start the server with -r MODEL.json (written by `recommend fit`)";

// No parameters: the empty form. A refused query: 400 with the form and the reason.
void get_suggest_page(State& s, const httplib::Request& req, httplib::Response& res) {
  SuggestPage page;
  page.model_file = s.options.recommender;
  page.submitted = QueryParams(req.params.begin(), req.params.end());
  SuggestQuery q;
  std::vector<Suggestion> suggestions;
  const bool submitted = !req.params.empty();
  if (submitted && !parse_request(req, q, page.error)) {
    res.status = 400;
  } else if (!s.recommender) {
    return text(res, 503, kNoModel);
  } else if (submitted) {
    if (run_suggest(s, q, suggestions, page.error)) {
      page.query = &q;
      page.suggestions = &suggestions;
    } else {
      res.status = 400;
    }
  }
  res.set_content(render_suggest_page(page), "text/html; charset=utf-8");
}

void get_suggest_api(State& s, const httplib::Request& req, httplib::Response& res) {
  SuggestQuery q;
  std::vector<Suggestion> suggestions;
  std::string error;
  if (!parse_request(req, q, error)) return text(res, 400, error);
  if (!s.recommender) return text(res, 503, kNoModel);
  if (!run_suggest(s, q, suggestions, error)) return text(res, 400, error);
  res.set_content(suggestions_json(q, suggestions), "application/json");
}

void get_runs_api(State& s, httplib::Response& res) {
  std::vector<RunRecord> runs;
  try {
    runs = load_runs({s.options.runs});
  } catch (const Error& e) {
    return text(res, 500, "runs: " + e.message());
  }
  res.set_content(runs_json(runs), "application/json");
}

// localhost, ::1 or an IPv4 address in 127.0.0.0/8 (parsed: "127.0.0.1.example.com" is not).
bool is_loopback(const std::string& host) {
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return host == "localhost" || host == "::1";
}

// The Host header's name without the port ("[::1]:8470" -> "::1").
std::string host_name(const std::string& header) {
  if (!header.empty() && header[0] == '[') return header.substr(1, header.find(']') - 1);
  return header.substr(0, header.find(':'));
}

void add_routes(httplib::Server& svr, State& s) {
  svr.set_default_headers({{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-store"}});
  if (is_loopback(s.options.host))
    svr.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      const std::string name = host_name(req.get_header_value("Host"));
      if (is_loopback(name)) return httplib::Server::HandlerResponse::Unhandled;
      text(res, 403, "Host '" + name + "' refused: this server answers requests for 127.0.0.1 or localhost only");
      return httplib::Server::HandlerResponse::Handled;
    });
  svr.Get("/", guarded([&s](const httplib::Request&, httplib::Response& res) { get_report(s, res); }));
  svr.Get("/healthz", guarded([](const httplib::Request&, httplib::Response& res) { text(res, 200, "ok"); }));
  svr.Get("/api/runs", guarded([&s](const httplib::Request&, httplib::Response& res) { get_runs_api(s, res); }));
  svr.Get("/suggest", guarded([&s](const httplib::Request& req, httplib::Response& res) {
    get_suggest_page(s, req, res);
  }));
  svr.Get("/api/suggest", guarded([&s](const httplib::Request& req, httplib::Response& res) {
    get_suggest_api(s, req, res);
  }));
  // Read-only: other methods are told so (httplib's own answer would be a bare 400 or 404).
  const auto get_only = [](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Allow", "GET, HEAD");
    text(res, 405, req.method + " " + req.path + ": method not allowed (this server answers GET only)");
  };
  svr.Post(".*", get_only).Put(".*", get_only).Patch(".*", get_only).Delete(".*", get_only);
  // Called for every answer >= 400: only the ones without a reason of their own get one.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      text(res, 404, "not found: " + req.path + " (routes: /, /suggest, /api/suggest, /api/runs, /healthz)");
    else
      text(res, res.status, "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path);
  });
  svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    std::cerr << one_line(req.method + " " + req.target) << " " << res.status << std::endl;
  });
  // A browser's idle keep-alive connection holds a clean stop for this long (default 5 s).
  svr.set_keep_alive_timeout(1);
  // httplib's default sets SO_REUSEPORT, with which a second server binds the same port and the
  // kernel splits the requests between the two; SO_REUSEADDR alone still allows a quick restart.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

std::string url_host(const std::string& host) {
  return host.find(':') == std::string::npos ? host : "[" + host + "]";
}

// Listens until SIGINT or SIGTERM. The signals are blocked in every thread and taken by one
// waiting thread (sigwait), which may call Server::stop (a signal handler may not); it repeats
// the stop until the server has stopped, in case the signal came before listening began.
void serve_until_signal(httplib::Server& svr) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  std::atomic<bool> done{false}, signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    if (done) return;
    signalled = true;
    while (!done) {
      svr.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const bool ok = svr.listen_after_bind();
  done = true;
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter when no signal came
  waiter.join();
  CHECK(ok || signalled, "the server stopped listening unexpectedly");
  std::cerr << "recommend serve: stopped" << std::endl;
}

}  // namespace

int serve_main(int argc, char** argv) {
  const std::optional<ServeOptions> parsed = parse_options(argc, argv);
  if (!parsed) return 0;
  State state;
  state.options = *parsed;
  const ServeOptions& o = state.options;
  // Blocked before any thread starts (the server's, and the OpenMP pool XGBoost's load and
  // predictions start), so they all inherit the mask and only the waiter takes the signals; a
  // thread without the mask would take SIGTERM's default action and kill the process. Their
  // default action first: a shell starts a background job with SIGINT ignored, and an ignored
  // signal never reaches sigwait. A closed client socket must not kill the server either.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (!o.recommender.empty())
    state.recommender = std::make_unique<Recommender>(Recommender::load(o.recommender));

  httplib::Server svr;
  add_routes(svr, state);
  errno = 0;
  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  // errno from bind() says why (in use, not this machine's address); a name that does not
  // resolve leaves an unrelated one.
  const bool bind_errno = errno == EADDRINUSE || errno == EACCES || errno == EADDRNOTAVAIL;
  CHECK(port > 0, "cannot listen on ", o.host, o.port == 0 ? " (any port)" : ":" + std::to_string(o.port),
        bind_errno ? std::string(": ") + std::strerror(errno) : std::string(),
        " (--host ADDR --port N; --port 0 picks a free port)");
  std::cout << "serving http://" << url_host(o.host) << ":" << port << "/ (runs: " << o.runs
            << ", model: " << (o.recommender.empty() ? "none" : o.recommender) << ")" << std::endl;
  serve_until_signal(svr);
  return 0;
}

}  // namespace mpicnn::recommend
