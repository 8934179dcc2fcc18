// The data service's producer, Server<T>: a ServerCore (service/server_core.hpp) whose feeds run
// a Loader<T> over each rank's pipeline (service/feed_runner.hpp).
#include <memory>
#include <utility>

#include "service/feed_runner.hpp"
#include "service/server_core.hpp"
#include "wds/service.hpp"

namespace wds {

template <class T>
Server<T>::Server(MakePipeline make_pipeline, ServerOptions options) {
  if (!make_pipeline) {
    throw Error::invalid_argument("Server: no pipeline factory");
  }
  // Shared with the feeds' threads, which may outlive the server (a stalled source).
  auto keep = std::make_shared<const ServerOptions>(options);
  detail::RunnerFactory factory = [make = std::move(make_pipeline), keep](const StreamInfo& info) {
    return std::make_unique<detail::LoaderRunner<T>>(make, info, keep);
  };
  core_ = std::make_unique<detail::ServerCore>(std::move(factory), std::move(options));
}

template <class T>
Server<T>::~Server() = default;

template <class T>
std::string Server<T>::endpoint() const {
  return core_->endpoint();
}

template <class T>
void Server<T>::run() {
  core_->run();
}

template <class T>
void Server<T>::stop() noexcept {
  core_->stop();
}

template <class T>
void Server<T>::save_state() noexcept {
  core_->request_save();
}

template <class T>
ServerMetrics Server<T>::metrics() const {
  return core_->metrics();
}

template class Server<Tuple>;
template class Server<DecodedSample>;

}  // namespace wds
