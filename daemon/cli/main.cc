// soartune: the command-line client of soartuned (gRPC API soartune.v1.Tuner).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "daemon/cli/client.h"
#include "daemon/cli/commands.h"

#ifndef SOARTUNE_VERSION
#define SOARTUNE_VERSION "unknown"
#endif

namespace {

// "--sort -score" would read "-score" as an option; glue such a value to its option ("--sort=-score").
std::vector<std::string> glue_negative_values(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const bool sort = a == "--sort" || a == "-s";
    if (sort && i + 1 < argc && argv[i + 1][0] == '-' && argv[i + 1][1] != '-' && argv[i + 1][1] != '\0') {
      args.push_back(a == "-s" ? std::string("-s") + argv[i + 1] : "--sort=" + std::string(argv[i + 1]));
      ++i;
    } else {
      args.push_back(std::move(a));
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace soartune::cli;
  CLI::App app{"soartune: submit tuning jobs to soartuned, follow them, browse trials, export configs, plan "
               "official submissions.\nExit codes: 0 ok, 1 error (or the watched job did not succeed), 2 usage / "
               "INVALID_ARGUMENT, 3 NOT_FOUND, 4 daemon unreachable, 5 FAILED_PRECONDITION, 6 RESOURCE_EXHAUSTED."};
  app.name("soartune");
  app.set_version_flag("--version", SOARTUNE_VERSION);
  app.require_subcommand(1);
  app.fallthrough();   // global options may also come after the subcommand

  Context ctx;
  app.add_option("--addr", ctx.global.addr, "soartuned address host:port")
      ->envname("SOARTUNE_ADDR")
      ->capture_default_str();
  app.add_option("--timeout", ctx.global.timeout_s,
                 "seconds per call; watch: how long to wait for a lost daemon to return")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--tls-ca", ctx.global.tls_ca, "talk TLS to soartuned, trusting this PEM CA bundle")
      ->envname("SOARTUNE_TLS_CA");
  app.add_option("--tls-cert", ctx.global.tls_cert, "client certificate (PEM), for a daemon requiring mutual TLS")
      ->envname("SOARTUNE_TLS_CERT");
  app.add_option("--tls-key", ctx.global.tls_key, "private key (PEM) of --tls-cert")->envname("SOARTUNE_TLS_KEY");
  app.add_option("--token-file", ctx.global.token_file,
                 "file holding the bearer token soartuned expects (else $SOARTUNE_TOKEN); needs --tls-ca")
      ->envname("SOARTUNE_TOKEN_FILE");

  add_job_commands(app, ctx);
  add_trial_commands(app, ctx);
  add_submission_commands(app, ctx);

  std::vector<std::string> args = glue_negative_values(argc, argv);
  std::reverse(args.begin(), args.end());   // CLI11 takes the arguments reversed
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (!ctx.action) return kExitUsage;
  std::string error;
  auto credentials = channel_credentials(ctx.global, &error);
  if (!credentials) return fail(kExitUsage, error);
  Client client(ctx.global, std::move(credentials));
  return ctx.action(client);
}
