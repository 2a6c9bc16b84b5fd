// Tests of include/platipus/io/: checkpoints (round trips, tampering,
// an independent reader), settings as JSON, atomic writes and metrics files.
// Part of components_test.cpp, which includes it once after helpers.hpp: the
// components' tests are one translation unit (build time).
#pragma once

namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The cells of one CSV line (RFC 4180: a quoted cell may hold commas, and
// "" inside it is one quote).
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

// A safetensors file's header and the bytes after it, and the file again
// from a (modified) header.
std::pair<nlohmann::json, std::string> split_checkpoint(const std::string& bytes) {
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  return {nlohmann::json::parse(bytes.substr(8, length)), bytes.substr(8 + length)};
}

std::string length_prefix(std::uint64_t length) {
  std::string prefix(8, '\0');
  std::memcpy(prefix.data(), &length, 8);
  return prefix;
}

std::string join_checkpoint(const nlohmann::json& header, const std::string& data) {
  const std::string json = header.dump();
  return length_prefix(json.size()) + json + data;
}

}  // namespace

namespace {

using FloatMaml = Maml<nn::Sequential, MseLoss>;
using FloatPlatipus = Platipus<nn::Sequential, MseLoss>;

nn::Sequential tiny(std::int64_t hidden = 8) {
  return nn::mlp({.inputs = 1, .hidden = {hidden}, .outputs = 1});
}

// Tiny learners named `names` ("platipus" a PLATIPUS, the others MAML),
// the i-th initialised from the seed seed + i.
using TinySet = LearnerSet<FloatMaml, FloatPlatipus>;
TinySet tiny_set(std::uint64_t seed, std::initializer_list<std::string> names) {
  TinySet set;
  for (const auto& name : names) {
    Generator init(seed++);
    if (name == "platipus")
      set.add(name, FloatPlatipus(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init));
    else
      set.add(name, FloatMaml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init));
  }
  return set;
}

bool same(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

}  // namespace

TEST_CASE("a MAML checkpoint restores exactly the same meta-parameters and metadata",
          "[components][io][checkpoint]") {
  TemporaryDirectory dir;
  const auto path = dir / "maml.ckpt";
  Generator init(51), data_gen(52);
  FloatMaml maml(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .driver = {.threads = 1}}, init);
  maml.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  const nlohmann::json metadata{
      {"step", 1}, {"experiment", "sinusoid"}, {"settings", {{"alpha", 0.01}}}};
  io::save(path, maml, metadata);

  Generator other_init(53);
  FloatMaml restored(tiny(), MseLoss{}, {.driver = {.threads = 1}}, other_init);
  REQUIRE_FALSE(same(restored.parameters(), maml.parameters()));
  const auto loaded = io::load(path, restored);
  CHECK(same(restored.parameters(), maml.parameters()));
  CHECK(loaded == metadata);
  CHECK(dir.entries() == std::vector<std::string>{"maml.ckpt"});
}

TEST_CASE("a PLATIPUS checkpoint restores all five meta-parameters exactly",
          "[components][io][checkpoint]") {
  TemporaryDirectory dir;
  const auto path = dir / "platipus.ckpt";
  Generator init(54), data_gen(55);
  FloatPlatipus model(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .driver = {.threads = 1}},
                      init);
  model.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  io::save(path, model, {{"steps", model.steps()}});

  Generator other_init(56);
  FloatPlatipus restored(tiny(), MseLoss{},
                         {.initial_prior_variance = 0.5,
                          .initial_posterior_variance = 0.2,
                          .initial_gamma_p = 0.3,
                          .initial_gamma_q = 0.4,
                          .driver = {.threads = 1}},
                         other_init);
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    REQUIRE_FALSE(same(restored.part(part), model.part(part)));
  }
  const auto metadata = io::load(path, restored);
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    INFO(FloatPlatipus::part_names[static_cast<std::size_t>(p)]);
    CHECK(same(restored.part(part), model.part(part)));
  }
  CHECK(metadata == nlohmann::json{{"steps", 1}});
}

TEST_CASE(
    "loading a checkpoint into another architecture fails naming the file and leaves the learner "
    "as it was",
    "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "eight.ckpt";
  Generator init(57);
  FloatMaml eight(tiny(8), MseLoss{}, {.driver = {.threads = 1}}, init);
  io::save(path, eight);
  FloatMaml nine(tiny(9), MseLoss{}, {.driver = {.threads = 1}}, init);
  const auto before = nine.parameters().clone();
  CHECK_THROWS_AS(io::load(path, nine), error);
  CHECK_THROWS_WITH(io::load(path, nine), Contains(path.string()) && Contains("architecture"));
  CHECK(same(nine.parameters(), before));
  SECTION("a PLATIPUS checkpoint has no MAML theta") {
    const auto platipus_path = dir / "platipus.ckpt";
    FloatPlatipus platipus(tiny(8), MseLoss{}, {.driver = {.threads = 1}}, init);
    io::save(platipus_path, platipus);
    CHECK_THROWS_WITH(io::load(platipus_path, eight),
                      Contains(platipus_path.string()) && Contains("theta"));
  }
}

TEST_CASE("a training state refuses what cannot resume with the same bits, naming the file",
          "[components][io][checkpoint][resume]") {
  TemporaryDirectory dir;
  const auto path = dir / "run.safetensors";
  Generator init(57), gen(58);
  FloatMaml maml(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .driver = {.threads = 1}}, init);
  maml.meta_train_step(data::SinusoidLineSampler<float>().sample(2, gen), gen);
  Generator other_init(59);
  FloatMaml other(tiny(), MseLoss{}, {.driver = {.threads = 1}}, other_init);
  const auto before = other.parameters().to_vector();
  const nlohmann::json position{{"seed", 1}, {"stream", 0}, {"counter", 0}};
  const std::string this_version(platipus::library_version);
  SECTION("meta-parameters alone, as io::save writes them") {
    io::save(path, maml);
    CHECK_THROWS_WITH(io::load_training_state(path, other),
                      Contains(path.string()) && Contains("no training state"));
  }
  SECTION("a step count that is not the optimiser's") {
    io::save_checkpoint(
        path, maml.model().layout(), maml.training_state(),
        {{"training_state",
          {{"steps", 5}, {"generator", position}, {"library_version", this_version}}}});
    CHECK_THROWS_WITH(io::load_training_state(path, other),
                      Contains(path.string()) && Contains("5 steps") && Contains("adam.step"));
  }
  SECTION("a generator position that is missing") {
    io::save_checkpoint(path, maml.model().layout(), maml.training_state(),
                        {{"training_state", {{"steps", 1}, {"library_version", this_version}}}});
    CHECK_THROWS_WITH(io::load_training_state(path, other),
                      Contains(path.string()) && Contains("\"seed\""));
  }
  SECTION("moments missing from a state past its first step") {
    io::save_checkpoint(
        path, maml.model().layout(), maml.state(),
        {{"training_state",
          {{"steps", 1}, {"generator", position}, {"library_version", this_version}}}});
    CHECK_THROWS_WITH(io::load_training_state(path, other),
                      Contains(path.string()) && Contains("adam.first/theta"));
  }
  SECTION("another library version, or none recorded") {
    io::save_checkpoint(path, maml.model().layout(), maml.training_state(),
                        {{"training_state",
                          {{"steps", 1}, {"generator", position}, {"library_version", "0.0.9"}}}});
    CHECK_THROWS_WITH(io::load_training_state(path, other),
                      Contains(path.string()) && Contains("platipus 0.0.9") &&
                          Contains("this is platipus " + this_version));
    io::save_checkpoint(path, maml.model().layout(), maml.training_state(),
                        {{"training_state", {{"steps", 1}, {"generator", position}}}});
    CHECK_THROWS_WITH(io::load_training_state(path, other),
                      Contains(path.string()) && Contains("did not record its version"));
    TinySet set = tiny_set(70, {"maml"});
    CHECK_THROWS_WITH(io::load_training_state(path, set), Contains("did not record its version"));
  }
  SECTION("another architecture") {
    io::save_training_state(path, maml, gen);
    FloatMaml wider(tiny(9), MseLoss{}, {.driver = {.threads = 1}}, other_init);
    CHECK_THROWS_WITH(io::load_training_state(path, wider),
                      Contains(path.string()) && Contains("architecture"));
  }
  CHECK(other.parameters().to_vector() == before);  // all or nothing
  CHECK(other.steps() == 0);
  CHECK_THROWS_WITH(io::save_training_state(path, maml, gen, {{"training_state", 1}}),
                    Contains(path.string()) && Contains("training_state"));
}

TEST_CASE("a training state saved before the first step resumes as a fresh optimiser",
          "[components][io][checkpoint][resume]") {
  TemporaryDirectory dir;
  const auto path = dir / "run.safetensors";
  Generator init(60), gen(61, 3);
  FloatMaml maml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  gen.bits();
  io::save_training_state(path, maml, gen);
  Generator other_init(62);
  FloatMaml restored(tiny(), MseLoss{}, {.driver = {.threads = 1}}, other_init);
  const auto resumed = io::load_training_state(path, restored);
  CHECK(same(restored.parameters(), maml.parameters()));
  CHECK(restored.steps() == 0);
  CHECK(restored.training_state().size() == 1);
  CHECK(resumed.generator.seed() == 61);
  CHECK(resumed.generator.stream() == 3);
  CHECK(resumed.generator.counter() == 1);
  CHECK(resumed.metadata == nlohmann::json::object());
}

TEST_CASE("a set's training state saves under the learners' names and resumes each one",
          "[components][io][checkpoint][resume]") {
  using Set = TinySet;
  TemporaryDirectory dir;
  const auto path = dir / "set.safetensors";
  auto make = [](std::uint64_t seed) {
    return tiny_set(seed, {"maml", "platipus"});
  };
  Set trained = make(60);
  Generator gen(61, 2);
  auto& maml = trained.get<FloatMaml>("maml");
  for (int step = 0; step < 2; ++step)
    maml.meta_train_step(data::SinusoidLineSampler<float>().sample(2, gen), gen);
  io::save_training_state(path, trained, gen, {{"run", "set"}});  // PLATIPUS not yet started

  Set restored = make(70);
  const auto resumed = io::load_training_state(path, restored);
  CHECK(resumed.metadata == nlohmann::json{{"run", "set"}});
  CHECK(resumed.generator.counter() == gen.counter());
  CHECK(resumed.generator.stream() == 2);
  const auto& again = restored.get<FloatMaml>("maml");
  CHECK(again.steps() == 2);
  const auto a = maml.training_state(), b = again.training_state();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(same(*a[i].second, *b[i].second));
  CHECK(restored.get<FloatPlatipus>("platipus").steps() == 0);
  CHECK(same(restored.get<FloatPlatipus>("platipus").part(FloatPlatipus::Part::mu_theta),
             trained.get<FloatPlatipus>("platipus").part(FloatPlatipus::Part::mu_theta)));

  SECTION("io::load reads its meta-parameters") {
    Set loaded = make(80);
    io::load(path, loaded);
    CHECK(same(loaded.get<FloatMaml>("maml").parameters(), maml.parameters()));
  }
  SECTION("a single learner's and a set's training states are not mistaken for each other") {
    FloatMaml alone = std::move(make(90).get<FloatMaml>("maml"));
    CHECK_THROWS_WITH(io::load_training_state(path, alone),
                      Contains(path.string()) && Contains("set of learners"));
    const auto single = dir / "single.safetensors";
    io::save_training_state(single, maml, gen);
    Set set = make(91);
    CHECK_THROWS_WITH(io::load_training_state(single, set),
                      Contains(single.string()) && Contains("one learner"));
  }
  SECTION("a learner the checkpoint lacks fails naming it, and no learner changes") {
    Set more = make(100);
    Generator init(101);
    more.add("maml_noise", FloatMaml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init));
    const auto before = more.get<FloatMaml>("maml").parameters().clone();
    CHECK_THROWS_WITH(io::load_training_state(path, more),
                      Contains(path.string()) && Contains("maml_noise"));
    CHECK(same(more.get<FloatMaml>("maml").parameters(), before));
    CHECK(more.get<FloatMaml>("maml").steps() == 0);
  }
}

TEST_CASE("a set of learners saves in one checkpoint under their names and loads all or none",
          "[components][io][checkpoint]") {
  using Set = TinySet;
  TemporaryDirectory dir;
  const auto path = dir / "set.safetensors";
  auto make = [](std::uint64_t seed) {
    return tiny_set(seed, {"maml", "maml_noise", "platipus"});
  };
  Set trained = make(60);
  Generator data_gen(61);
  trained.for_each([&](const std::string&, auto& learner) {
    learner.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  });
  io::save(path, trained, {{"run", "set"}});
  CHECK(trained.names() == std::vector<std::string>{"maml", "maml_noise", "platipus"});
  const auto stored = io::load_checkpoint<float>(path);
  CHECK(stored.tensors.contains("maml/theta"));
  CHECK(stored.tensors.contains("maml_noise/theta"));
  CHECK(stored.tensors.contains("platipus/mu_theta"));
  CHECK(stored.tensors.size() == 2 + FloatPlatipus::part_count);

  Set restored = make(70);
  REQUIRE_FALSE(same(restored.get<FloatMaml>("maml").parameters(),
                     trained.get<FloatMaml>("maml").parameters()));
  CHECK(io::load(path, restored) == nlohmann::json{{"run", "set"}});
  for (const char* name : {"maml", "maml_noise"})
    CHECK(same(restored.get<FloatMaml>(name).parameters(),
               trained.get<FloatMaml>(name).parameters()));
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    CHECK(same(restored.get<FloatPlatipus>("platipus").part(part),
               trained.get<FloatPlatipus>("platipus").part(part)));
  }

  SECTION("a learner the checkpoint lacks fails naming it, and no learner changes") {
    Set more = make(80);
    Generator init(81);
    more.add("platipus_kl0.15", FloatPlatipus(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init));
    const auto before = more.get<FloatMaml>("maml").parameters().clone();
    CHECK_THROWS_WITH(io::load(path, more),
                      Contains(path.string()) && Contains("platipus_kl0.15/mu_theta"));
    CHECK(same(more.get<FloatMaml>("maml").parameters(), before));
  }
  SECTION("a subset loads from it") {
    Set one;
    Generator init(90);
    one.add("platipus", FloatPlatipus(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init));
    io::load(path, one);
    CHECK(same(one.get<FloatPlatipus>("platipus").part(FloatPlatipus::Part::mu_theta),
               trained.get<FloatPlatipus>("platipus").part(FloatPlatipus::Part::mu_theta)));
  }
  SECTION("learners of two architectures are refused on saving, naming the second") {
    Set mixed = make(100);
    Generator init(101);
    mixed.add("wide", FloatMaml(tiny(16), MseLoss{}, {.driver = {.threads = 1}}, init));
    CHECK_THROWS_WITH(io::save(dir / "mixed.safetensors", mixed),
                      Contains("'wide'") && Contains("architecture"));
    CHECK_THROWS_WITH(io::save(dir / "empty.safetensors", Set{}), Contains("empty"));
    CHECK(dir.entries() == std::vector<std::string>{"set.safetensors"});
  }
}

TEST_CASE("a set of learners refuses bad names and asks for a learner by name and type",
          "[components][meta][errors]") {
  LearnerSet<FloatMaml, FloatPlatipus> set;
  Generator init(110);
  auto& maml = set.add("maml", FloatMaml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init));
  CHECK(&set.get<FloatMaml>("maml") == &maml);
  CHECK(set.contains("maml"));
  CHECK_FALSE(set.contains("platipus"));
  CHECK_THROWS_WITH(set.add("maml", FloatMaml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init)),
                    Contains("already a learner named 'maml'"));
  for (const char* bad : {"", "maml/noise"}) {
    INFO(bad);
    CHECK_THROWS_AS(set.add(bad, FloatMaml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init)),
                    error);
  }
  CHECK_THROWS_WITH(set.get<FloatMaml>("platipus"),
                    Contains("no learner named 'platipus'") && Contains("maml"));
  CHECK_THROWS_WITH(set.get<FloatPlatipus>("maml"), Contains("another type"));
  CHECK(set.size() == 1);
  CHECK(set.erase("maml"));
  CHECK_FALSE(set.erase("maml"));
  CHECK(set.empty());
}

TEST_CASE("every settings struct goes to JSON and back, keeping the defaults of absent keys",
          "[components][io][settings]") {
  const PlatipusSettings platipus{
      .inner_loop = {.steps = 3, .evaluation_steps = 7},
      .mean_steps = 2,
      .kl_weight = 0.25,
      .query_reduction = Reduction::mean,
      .kl_anneal_steps = 100,
      .prior_likelihood_weight = 0.5,
      .posterior_data = PosteriorData::support_and_query,
      .initial_prior_variance = 0.02,
      .initial_posterior_variance = 0.03,
      .initial_gamma_p = 0.04,
      .initial_gamma_q = 0.05,
      .driver = {.meta_optimizer = {.learning_rate = 1e-2, .annealing_steps = 9},
                 .threads = 2,
                 .task_chunks = 3}};
  const nlohmann::json j = platipus;
  CHECK(j["posterior_data"] == "support_and_query");
  CHECK(j["query_reduction"] == "mean");
  CHECK(j["inner_loop"]["learning_rate"] == 1e-3);  // PLATIPUS's own default
  CHECK(j["meta_optimizer"]["annealing_steps"] == 9);
  CHECK(nlohmann::json(j.get<PlatipusSettings>()) == j);
  CHECK(nlohmann::json(PlatipusSettings{})["inner_loop"]["evaluation_steps"].is_null());

  const MamlSettings maml{.inner_loop = {.steps = 1, .learning_rate = 0.5, .gradient_noise = 2},
                          .first_order = true};
  const MetaSgdSettings metasgd{.inner_loop = {.max_gradient_norm = 10},
                                .driver = {.task_chunks = -1}};
  const AnilSettings anil{.head = {"layer4.weight", "layer4.bias"}, .first_order = true};
  const ReptileSettings reptile{.inner_loop = {.steps = 8}, .driver = {.threads = 4}};
  const MamlPlusPlusSettings mamlpp{.multi_step_loss_steps = 5, .first_order_steps = 6};
  CHECK(nlohmann::json(nlohmann::json(maml).get<MamlSettings>()) == nlohmann::json(maml));
  CHECK(nlohmann::json(nlohmann::json(metasgd).get<MetaSgdSettings>()) == nlohmann::json(metasgd));
  CHECK(nlohmann::json(anil).get<AnilSettings>().head == anil.head);
  CHECK(nlohmann::json(reptile).get<ReptileSettings>().driver.threads == 4);
  CHECK(nlohmann::json(nlohmann::json(mamlpp).get<MamlPlusPlusSettings>()) ==
        nlohmann::json(mamlpp));
  CHECK(nlohmann::json(maml).get<MamlSettings>().inner_loop.gradient_noise == 2);

  // Absent keys keep the struct's defaults, nested ones too: PLATIPUS's
  // inner rate stays 1e-3 and Meta-SGD keeps one step.
  const auto partial =
      nlohmann::json{{"kl_weight", 0.5}, {"inner_loop", {{"steps", 10}}}}.get<PlatipusSettings>();
  CHECK(partial.kl_weight == 0.5);
  CHECK(partial.inner_loop.steps == 10);
  CHECK(partial.inner_loop.learning_rate == 1e-3);
  CHECK(partial.initial_gamma_p == PlatipusSettings{}.initial_gamma_p);
  CHECK(nlohmann::json{{"inner_loop", {{"learning_rate", 0.1}}}}
            .get<MetaSgdSettings>()
            .inner_loop.steps == 1);
}

TEST_CASE("the networks', losses' and task samplers' settings go to JSON and back",
          "[components][io][settings]") {
  const nn::MlpSettings mlp{.inputs = 2,
                            .hidden = {30, 20},
                            .outputs = 3,
                            .activation = nn::Activation::tanh,
                            .bias_transform = 4,
                            .init = nn::Init::glorot_uniform};
  const nlohmann::json j = mlp;
  CHECK(j["activation"] == "tanh");
  CHECK(j["init"] == "glorot_uniform");
  const auto back = j.get<nn::MlpSettings>();
  CHECK(back.hidden == mlp.hidden);
  CHECK(nn::mlp(back).layout().size() == nn::mlp(mlp).layout().size());
  CHECK(nlohmann::json(back) == j);

  const nn::ConvNetSettings conv{
      .channels = 3, .size = 84, .filters = 32, .strided = true, .batch_norm = false};
  CHECK(nlohmann::json(nlohmann::json(conv).get<nn::ConvNetSettings>()) == nlohmann::json(conv));
  const data::SinusoidLineSettings sine{.support = 7, .noise_std = 0.1, .sinusoid_fraction = 1};
  CHECK(nlohmann::json(nlohmann::json(sine).get<data::SinusoidLineSettings>()) ==
        nlohmann::json(sine));
  const data::CirclesSettings circles{.support = 2, .radius_max = 1.5};
  CHECK(nlohmann::json(circles).get<data::CirclesSettings>().radius_max == 1.5);
  CHECK(nlohmann::json{{"noise_std", 0.5}}.get<GaussianNllLoss>().noise_std == 0.5);
  CHECK(nlohmann::json{{"reduction", "sum"}}.get<SoftmaxCrossEntropyLoss>().reduction ==
        Reduction::sum);
  CHECK_THROWS_WITH(nlohmann::json({{"activation", "gelu"}}).get<nn::MlpSettings>(),
                    Contains("\"activation\"") && Contains("none of none, relu, tanh, sigmoid"));
  CHECK_THROWS_WITH(nlohmann::json({{"noise_std", 0.5}}).get<MseLoss>(),
                    Contains("unknown setting \"noise_std\""));
}

TEST_CASE("reading settings from JSON refuses unknown keys and values of another type, naming them",
          "[components][io][settings][errors]") {
  auto refused = [](const nlohmann::json& j) {
    try {
      (void)j.get<PlatipusSettings>();
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused({{"kl_weigth", 1}}), Contains("unknown setting \"kl_weigth\""));
  CHECK_THAT(refused({{"inner_loop", {{"steps", 1.5}}}}),
             Contains("\"inner_loop\"") && Contains("\"steps\"") && Contains("integer"));
  CHECK_THAT(refused({{"inner_loop", {{"stepz", 1}}}}), Contains("unknown setting \"stepz\""));
  CHECK_THAT(refused({{"query_reduction", "avg"}}),
             Contains("\"query_reduction\"") && Contains("none of mean, sum"));
  CHECK_THAT(refused({{"kl_weight", "1.5"}}), Contains("\"kl_weight\"") && Contains("number"));
  CHECK_THAT(refused({{"threads", 10000000000}}), Contains("\"threads\"") && Contains("range"));
  CHECK_THAT(refused({{"threads", -1}}), Contains("accepted"));  // the learner refuses it
  CHECK_THAT(refused(nlohmann::json::array()), Contains("expected an object"));
  CHECK_THROWS_WITH(nlohmann::json({{"first_order", 1}}).get<MamlSettings>(),
                    Contains("\"first_order\"") && Contains("true or false"));
  CHECK_THROWS_WITH(nlohmann::json({{"head", {1, 2}}}).get<AnilSettings>(), Contains("\"head\""));
}

TEST_CASE("a truncated, corrupt or missing checkpoint fails naming the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "good.safetensors";
  Generator init(58);
  FloatMaml maml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  io::save(path, maml);
  const auto before = maml.parameters().clone();
  const std::string bytes = slurp(path);
  auto fails_naming_file = [&](const std::string& name, const std::string& contents,
                               const std::string& why) {
    const auto bad = dir / name;
    write_bytes(bad, contents);
    INFO(name);
    CHECK_THROWS_AS(io::load(bad, maml), error);
    CHECK_THROWS_WITH(io::load(bad, maml), Contains(bad.string()) && Contains(why));
  };
  fails_naming_file("data-cut.safetensors", bytes.substr(0, bytes.size() - 4), "outside");
  fails_naming_file("header-cut.safetensors", bytes.substr(0, 18), "header length");
  fails_naming_file("length-only.safetensors", bytes.substr(0, 8), "header length");
  fails_naming_file("empty.safetensors", "", "too short");
  fails_naming_file("huge-length.safetensors", length_prefix(std::uint64_t{1} << 63) + "{}",
                    "header length");
  std::string broken_json = bytes;
  broken_json[8] = '#';  // the header's opening brace
  fails_naming_file("broken-json.safetensors", broken_json, "JSON");
  fails_naming_file("old-format.bin", std::string(io::old_checkpoint_magic) + "2\n{}",
                    "convert_checkpoint.py");
  const auto missing = dir / "missing.safetensors";
  CHECK_THROWS_WITH(io::load(missing, maml), Contains(missing.string()));
  CHECK(same(maml.parameters(), before));
}

TEST_CASE("a checkpoint whose header was tampered with fails naming the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "good.safetensors";
  Generator init(60);
  FloatPlatipus platipus(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  io::save(path, platipus);
  const auto [header, data] = split_checkpoint(slurp(path));
  REQUIRE(header.size() == 6);  // five parts and __metadata__
  const auto first = header["mu_theta"]["data_offsets"];
  REQUIRE(first == nlohmann::json{0, data.size() / 5});
  const auto before = platipus.part(FloatPlatipus::mu_theta).clone();
  auto fails_naming_file = [&](const std::string& name, const std::string& bytes,
                               const std::string& why) {
    const auto bad = dir / name;
    write_bytes(bad, bytes);
    INFO(name);
    CHECK_THROWS_AS(io::load(bad, platipus), error);
    CHECK_THROWS_WITH(io::load(bad, platipus), Contains(bad.string()) && Contains(why));
  };
  auto changed = [&](auto&& change) {
    auto h = header;
    change(h);
    return join_checkpoint(h, data);
  };
  fails_naming_file("offset-past-end.safetensors", changed([&](auto& h) {
                      h["log_gamma_q"]["data_offsets"] = {data.size(), data.size() + 4};
                    }),
                    "outside");
  // The reproducer of the issue: one offset moved by 1000 bytes loaded shifted values.
  fails_naming_file("offset-shifted.safetensors", changed([&](auto& h) {
                      h["log_v_q"]["data_offsets"][0] =
                          h["log_v_q"]["data_offsets"][0].template get<std::uint64_t>() + 1000;
                    }),
                    "bytes of data");
  fails_naming_file("all-offsets-zero.safetensors", changed([&](auto& h) {
                      for (auto& [name, spec] : h.items())
                        if (name != "__metadata__") spec["data_offsets"] = first;
                    }),
                    "overlap or leave a gap");
  fails_naming_file("fractional-offset.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["data_offsets"][0] = 0.5; }),
                    "non-negative integers");
  fails_naming_file("unaligned-offset.safetensors", changed([&](auto& h) {
                      h["mu_theta"]["data_offsets"] = {1, 1};
                      h["mu_theta"]["shape"] = {0};
                    }),
                    "aligned");
  fails_naming_file("shape-too-large.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["shape"] = {1000}; }), "needs");
  fails_naming_file("shape-not-a-list.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["shape"] = "twenty-five"; }), "shape");
  fails_naming_file("negative-dimension.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["shape"] = {-1}; }), "non-negative");
  // numel * 4 wrapped past 2^64 here, passed the bounds check and aborted in
  // std::vector's constructor; 2^32 x 2^32 overflowed Shape::numel.
  for (const auto& shape : {nlohmann::json{std::uint64_t{1} << 62},
                            nlohmann::json{std::uint64_t{1} << 31, std::uint64_t{1} << 31},
                            nlohmann::json{std::uint64_t{1} << 32, std::uint64_t{1} << 32}})
    fails_naming_file("shape-overflows.safetensors",
                      changed([&](auto& h) { h["mu_theta"]["shape"] = shape; }), "overflows");
  fails_naming_file("no-tensors.safetensors", changed([&](auto& h) {
                      for (const char* part : {"mu_theta", "log_sigma2_theta", "log_v_q",
                                               "log_gamma_p", "log_gamma_q"})
                        h.erase(part);
                    }),
                    "cover");
  fails_naming_file("dtype-a-number.safetensors",
                    changed([&](auto& h) { h["mu_theta"]["dtype"] = 32; }), "dtype");
  fails_naming_file("trailing-garbage.safetensors", slurp(path) + "garbage!", "cover");
  fails_naming_file("no-checksum.safetensors",
                    changed([&](auto& h) { h["__metadata__"].erase("platipus.checksum"); }),
                    "platipus.checksum");
  // With its checksum made to match: the depth limit refuses it before any parse.
  fails_naming_file("deep-metadata.safetensors", changed([&](auto& h) {
                      auto& stored = h["__metadata__"];
                      const std::string deep = std::string(200000, '[') + std::string(200000, ']');
                      stored["platipus.metadata"] = deep;
                      stored["platipus.checksum"] = io::whole_checksum(
                          DataChecksum()
                              .add(stored["platipus.layout"].template get<std::string>())
                              .add(io::zero_byte)
                              .add(deep)
                              .add(io::zero_byte)
                              .add(data));
                    }),
                    "nested deeper");
  std::string deep_header = header.dump();
  deep_header.insert(1, "\"deep\":" + std::string(200000, '[') + std::string(200000, ']') + ",");
  fails_naming_file("deep-header.safetensors",
                    length_prefix(deep_header.size()) + deep_header + data, "nested deeper");
  // JSON keeps the last of two equal keys; a checkpoint must not mean two things.
  std::string twice = header.dump();
  twice.insert(1, "\"mu_theta\":" + header["log_v_q"].dump() + ",");
  fails_naming_file("duplicate-tensor.safetensors", length_prefix(twice.size()) + twice + data,
                    "duplicate key");
  // The untouched header, rebuilt, loads: the helpers above change only what they say.
  const auto good = dir / "rebuilt.safetensors";
  write_bytes(good, join_checkpoint(header, data));
  CHECK_NOTHROW(io::load(good, platipus));
  CHECK(same(platipus.part(FloatPlatipus::mu_theta), before));
}

TEST_CASE("a checkpoint with flipped data bytes fails its checksum, naming the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "good.safetensors";
  Generator init(61);
  FloatMaml maml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  io::save(path, maml);
  const std::string bytes = slurp(path);
  const auto [header, data] = split_checkpoint(bytes);
  const std::size_t data_start = bytes.size() - data.size();
  Generator gen(62);
  const auto positions = raw::uniform<double, cpu>(Shape{150}, gen).to_vector();
  const auto flips = raw::uniform<double, cpu>(Shape{150}, gen).to_vector();
  int refused = 0;
  for (std::size_t i = 0; i < positions.size(); ++i) {
    std::string corrupt = bytes;
    const auto at = data_start + static_cast<std::size_t>(positions[i] * double(data.size()));
    corrupt[at] = static_cast<char>(corrupt[at] ^ (1 + static_cast<int>(flips[i] * 255)));
    const auto bad = dir / "flipped.safetensors";
    write_bytes(bad, corrupt);
    try {
      io::load(bad, maml);
    } catch (const error& e) {
      refused += std::string(e.what()).find("checksum") != std::string::npos;
    }
  }
  CHECK(refused == 150);
}

TEST_CASE("a checkpoint whose recorded settings changed by one byte fails its checksum",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "run.safetensors";
  Generator init(64);
  FloatMaml maml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  io::save(path, maml, {{"options", {{"kl_weight", 1.5}, {"steps", 20000}}}});
  std::string bytes = slurp(path);
  // Still valid JSON, and a setting a resumed run would silently take on.
  const auto at = bytes.find("20000");
  REQUIRE(at != std::string::npos);
  bytes[at] = '3';
  const auto bad = dir / "edited.safetensors";
  write_bytes(bad, bytes);
  CHECK_THROWS_WITH(io::load(bad, maml),
                    Contains(bad.string()) && Contains("checksum") && Contains("header and data"));

  SECTION("a checkpoint whose checksum covers its data alone, as before, still loads") {
    const auto stored = io::load_checkpoint<float>(path);
    const auto values = maml.parameters().to_vector();
    const std::string_view data(reinterpret_cast<const char*>(values.data()),
                                values.size() * sizeof(float));
    const auto older = dir / "older.safetensors";
    io::write_safetensors(older, {{"theta", "F32", maml.parameters().shape(), data}},
                          {{"platipus.layout", stored.layout.dump()},
                           {"platipus.metadata", stored.metadata.dump()},
                           {"platipus.checksum", DataChecksum().add(data).text()}});
    CHECK(io::load(older, maml) == stored.metadata);
  }
}

TEST_CASE("a checkpoint holding NaN or Inf is refused unless the caller allows it",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  Generator init(63);
  FloatMaml maml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto values = maml.parameters().to_vector();
    values[3] = bad;
    const auto tensor = Tensor<float>::from_host(maml.parameters().shape(), values);
    const auto path = dir / "non-finite.safetensors";
    io::save_checkpoint<float, cpu>(path, maml.model().layout(), {{"theta", &tensor}});
    INFO(bad);
    CHECK_THROWS_WITH(io::load(path, maml),
                      Contains(path.string()) && Contains("non-finite") && Contains("element 3"));
    const auto loaded = io::load_checkpoint<float>(path, {.allow_non_finite = true});
    CHECK_FALSE(std::isfinite(loaded.tensors.at("theta").to_vector()[3]));  // loaded as it is
  }
}

TEST_CASE("only regular files are read as checkpoints or replaced by writes",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  Generator init(64);
  FloatMaml maml(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  const auto fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Read: a FIFO blocked for ever and /dev/zero read until memory ran out.
  for (const std::filesystem::path& path : {fifo, std::filesystem::path("/dev/zero"), dir.path()}) {
    INFO(path);
    CHECK_THROWS_WITH(io::load(path, maml),
                      Contains(path.string()) && Contains("not a regular file"));
  }
  // Write: renaming over a FIFO, a device or a directory would replace it.
  for (const std::filesystem::path& path : {fifo, dir.path()}) {
    INFO(path);
    CHECK_THROWS_WITH(io::save(path, maml), Contains(path.string()) && Contains("not a regular"));
  }
  CHECK(std::filesystem::is_fifo(fifo));
  // A symlink is written through: the file it points to is replaced, the link stays.
  const auto target = dir / "target.safetensors", link = dir / "latest.safetensors";
  write_bytes(target, "old");
  std::filesystem::create_symlink("target.safetensors", link);
  io::save(link, maml);
  CHECK(std::filesystem::is_symlink(link));
  CHECK(slurp(target) == slurp(link));
  CHECK_NOTHROW(io::load(target, maml));
  const auto to_fifo = dir / "to-fifo";
  std::filesystem::create_symlink(fifo, to_fifo);
  CHECK_THROWS_WITH(io::save(to_fifo, maml), Contains(fifo.string()) && Contains("a FIFO"));
}

// safetensors is a format other tools read: a few lines of Python with json
// and struct (tests/read_checkpoint.py, no platipus code) must find the same
// names, shapes, values and metadata that were saved.
TEST_CASE("an independent Python reader reads a checkpoint's tensors and metadata back",
          "[components][io][checkpoint]") {
  if (std::string(PLATIPUS_PYTHON3).empty()) {
    WARN("python3 was not found when configuring: the independent reader is not run");
    return;
  }
  TemporaryDirectory dir;
  const auto path = dir / "platipus.safetensors";
  Generator init(65), data_gen(66);
  FloatPlatipus model(tiny(), MseLoss{}, {.inner_loop = {.steps = 1}, .driver = {.threads = 1}},
                      init);
  model.meta_train_step(data::SinusoidLineSampler<float>().sample(2, data_gen), data_gen);
  const nlohmann::json metadata{{"steps", 1}, {"note", "read by Python"}};
  io::save(path, model, metadata);
  const auto output = dir / "read.json";
  const std::string command =
      fmt::format("'{}' '{}/read_checkpoint.py' '{}' > '{}'", PLATIPUS_PYTHON3, PLATIPUS_TESTS_DIR,
                  path.string(), output.string());
  REQUIRE(std::system(command.c_str()) == 0);
  const auto read = nlohmann::json::parse(slurp(output));
  CHECK(nlohmann::json::parse(read["metadata"]["platipus.metadata"].get<std::string>()) ==
        metadata);
  CHECK(nlohmann::json::parse(read["metadata"]["platipus.layout"].get<std::string>()) ==
        io::describe_layout(model.model().layout()));
  CHECK(read["tensors"].size() == FloatPlatipus::part_count);
  for (int p = 0; p < FloatPlatipus::part_count; ++p) {
    const auto part = static_cast<FloatPlatipus::Part>(p);
    const std::string name(FloatPlatipus::part_names[static_cast<std::size_t>(p)]);
    INFO(name);
    const auto& tensor = read["tensors"].at(name);
    CHECK(tensor["shape"] == std::vector<std::int64_t>{model.part(part).numel()});
    const auto values = model.part(part).to_vector();
    REQUIRE(tensor["values"].size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      CHECK(tensor["values"][i].get<double>() == static_cast<double>(values[i]));
  }
  // A flipped data byte fails the reader's own checksum check too.
  std::string bytes = slurp(path);
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x10);
  write_bytes(path, bytes);
  CHECK(std::system(command.c_str()) != 0);
}

TEST_CASE("a float checkpoint loaded as double fails, naming both dtypes and the file",
          "[components][io][checkpoint][errors]") {
  TemporaryDirectory dir;
  const auto path = dir / "float.safetensors";
  Generator init(59);
  FloatMaml single(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  io::save(path, single);
  Maml<nn::Sequential, MseLoss, double> twice(tiny(), MseLoss{}, {.driver = {.threads = 1}}, init);
  CHECK_THROWS_AS(io::load(path, twice), error);
  CHECK_THROWS_WITH(io::load(path, twice),
                    Contains(path.string()) && Contains("float32") && Contains("float64"));
}

TEST_CASE("write_file_atomically replaces the content and leaves no temporary file",
          "[components][io][atomic]") {
  TemporaryDirectory dir;
  const auto path = dir / "nested" / "file.txt";
  write_file_atomically(path, "the first, longer content\n");
  CHECK(slurp(path) == "the first, longer content\n");
  write_file_atomically(path, "second");
  CHECK(slurp(path) == "second");
  CHECK(read_file(path) == "second");
  std::string binary("a\0b\nc", 5);
  write_file_atomically(path, binary);
  CHECK(read_file(path) == binary);
  CHECK(dir.entries() == std::vector<std::string>{"nested"});
  std::vector<std::string> nested;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "nested"))
    nested.push_back(e.path().filename().string());
  CHECK(nested == std::vector<std::string>{"file.txt"});
  CHECK_THROWS_WITH(read_file(dir / "absent.txt"), Contains((dir / "absent.txt").string()));
}

TEST_CASE(
    "write_file_atomically keeps a replaced file's mode and gives a new one 0666 less the "
    "umask",
    "[components][io][atomic]") {
  TemporaryDirectory dir;
  const auto mode_of = [](const std::filesystem::path& p) {
    struct ::stat info;
    REQUIRE(::stat(p.c_str(), &info) == 0);
    return info.st_mode & 07777;
  };
  const ::mode_t mask = ::umask(022);
  const auto fresh = dir / "fresh.txt";
  write_file_atomically(fresh, "new");
  CHECK(mode_of(fresh) == 0644);
  const auto kept = dir / "kept.txt";
  write_file_atomically(kept, "old");
  REQUIRE(::chmod(kept.c_str(), 0664) == 0);  // a mode the umask would cut down
  write_file_atomically(kept, "replaced");
  CHECK(mode_of(kept) == 0664);
  CHECK(slurp(kept) == "replaced");
  ::umask(mask);
}

TEST_CASE("MetricsLog writes each row as a JSON line and as a CSV row over the union of columns",
          "[components][io][metrics]") {
  TemporaryDirectory dir;
  io::MetricsLog log(dir.path(), "train");
  const std::vector<nlohmann::json> rows{
      {{"step", 1}, {"loss", 0.5}},
      {{"step", 2}, {"loss", 0.25}, {"accuracy", 0.875}},
      {{"step", 3}, {"phase", "test"}},
  };
  for (const auto& r : rows) log.record(r);
  CHECK(log.rows() == rows);
  CHECK(dir.entries() == std::vector<std::string>{"train.csv", "train.jsonl"});

  const auto jsonl = lines_of(slurp(dir / "train.jsonl"));
  REQUIRE(jsonl.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) CHECK(nlohmann::json::parse(jsonl[i]) == rows[i]);

  const auto csv = lines_of(slurp(dir / "train.csv"));
  REQUIRE(csv.size() == rows.size() + 1);
  auto header = cells_of(csv[0]);
  auto sorted = header;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"accuracy", "loss", "phase", "step"});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto cells = cells_of(csv[i + 1]);
    REQUIRE(cells.size() == header.size());
    for (std::size_t c = 0; c < header.size(); ++c) {
      INFO("row " << i << " column " << header[c]);
      if (!rows[i].contains(header[c]))
        CHECK(cells[c].empty());
      else if (rows[i][header[c]].is_string())
        CHECK(cells[c] == rows[i][header[c]].get<std::string>());
      else
        CHECK(std::stod(cells[c]) == rows[i][header[c]].get<double>());
    }
  }
  SECTION("a later row is appended to both files as it is recorded") {
    log.record({{"step", 4}, {"loss", 0.125}});
    CHECK(lines_of(slurp(dir / "train.jsonl")).size() == 4);
    CHECK(lines_of(slurp(dir / "train.csv")).size() == 5);
    CHECK(dir.entries() == std::vector<std::string>{"train.csv", "train.jsonl"});
  }
  CHECK_THROWS_WITH(log.record(nlohmann::json::array({1, 2})), Contains("MetricsLog::record"));
}

// A value holding a comma or a quote, written as it is, would split into
// extra cells and shift every column after it; RFC 4180 quotes such a cell.
TEST_CASE("MetricsLog quotes CSV cells that hold a comma or a quote", "[components][io][metrics]") {
  TemporaryDirectory dir;
  io::MetricsLog log(dir.path(), "notes");
  const nlohmann::json row{{"a_note", "omniglot, 5-way \"hard\""}, {"step", 7}};
  log.record(row);
  const auto csv = lines_of(slurp(dir / "notes.csv"));
  REQUIRE(csv.size() == 2);
  const auto header = cells_of(csv[0]), cells = cells_of(csv[1]);
  REQUIRE(header.size() == 2);
  CHECK(cells.size() == 2);
  for (std::size_t c = 0; c < std::min(header.size(), cells.size()); ++c) {
    INFO("column " << header[c]);
    if (header[c] == "step")
      CHECK(cells[c] == "7");
    else
      CHECK(cells[c] == row["a_note"].get<std::string>());
  }
}

TEST_CASE("MetricsLog resumes a stopped run's files at its saved row count, dropping later rows",
          "[components][io][metrics][resume]") {
  TemporaryDirectory stopped, straight;
  const auto row = [](int step) {
    nlohmann::json r{{"learner", "maml"}, {"step", step}, {"query_loss", 1.0 / step}};
    if (step >= 3) r["kl"] = 0.25 * step;  // a column that appears later
    return r;
  };
  {
    io::MetricsLog log(stopped.path(), "train");
    for (int step = 1; step <= 5; ++step) log.record(row(step));
  }
  std::ofstream(stopped / "train.jsonl", std::ios::app) << "{\"learner\": \"ma";  // torn by a kill
  io::MetricsLog resumed(stopped.path(), "train");
  resumed.resume(3);
  CHECK(resumed.rows().size() == 3);
  for (int step = 4; step <= 6; ++step) resumed.record(row(step));
  io::MetricsLog log(straight.path(), "train");
  for (int step = 1; step <= 6; ++step) log.record(row(step));
  CHECK(slurp(stopped / "train.jsonl") == slurp(straight / "train.jsonl"));
  CHECK(slurp(stopped / "train.csv") == slurp(straight / "train.csv"));

  SECTION("and refuses files with fewer rows, or a row that is not an object, naming the file") {
    io::MetricsLog again(stopped.path(), "train");
    CHECK_THROWS_WITH(again.resume(9), Contains("train.jsonl") && Contains("6 complete rows") &&
                                           Contains("had written 9"));
    std::ofstream(stopped / "train.jsonl", std::ios::app) << "[1, 2]\n";
    CHECK_THROWS_WITH(again.resume(7), Contains("train.jsonl") && Contains("line 7"));
    TemporaryDirectory empty;
    io::MetricsLog missing(empty.path(), "train");
    CHECK_THROWS_WITH(missing.resume(1), Contains("train.jsonl"));
  }
}

TEST_CASE("MetricsLog puts each row on disk as it is recorded, so a run that stops keeps them",
          "[components][io][metrics]") {
  TemporaryDirectory dir;
  io::MetricsLog log(dir.path(), "train");
  for (int step = 1; step <= 3; ++step) {
    log.record({{"learner", "platipus"}, {"step", step}, {"query_loss", 1.0 / step}});
    // Read back with no flush and while the log is alive: what a crash leaves.
    const auto jsonl = lines_of(slurp(dir / "train.jsonl"));
    REQUIRE(jsonl.size() == static_cast<std::size_t>(step));
    CHECK(nlohmann::json::parse(jsonl.back())["step"] == step);
    CHECK(lines_of(slurp(dir / "train.csv")).size() == static_cast<std::size_t>(step + 1));
  }
  // A row with a new column rewrites the CSV under the wider header.
  log.record({{"learner", "platipus"}, {"step", 4}, {"kl", 0.5}});
  const auto csv = lines_of(slurp(dir / "train.csv"));
  REQUIRE(csv.size() == 5);
  CHECK(cells_of(csv[0]).size() == 4);
  CHECK(cells_of(csv[1]).size() == 4);
  SECTION("a new log over the same files starts them afresh") {
    io::MetricsLog again(dir.path(), "train");
    again.record({{"step", 1}});
    CHECK(lines_of(slurp(dir / "train.jsonl")).size() == 1);
  }
}

TEST_CASE("StopSignals notes the first SIGINT or SIGTERM and leaves a second to end the process",
          "[components][signals]") {
  struct sigaction before {
  }, after{};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    const StopSignals stop;
    CHECK_FALSE(stop.requested());
    std::raise(SIGTERM);
    CHECK(stop.requested());
    CHECK(stop.signal() == SIGTERM);
  }
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);  // restored
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const StopSignals stop;
    std::raise(SIGINT);
    if (!stop.requested()) ::_exit(1);
    std::raise(SIGINT);  // the default action: the process ends here
    ::_exit(2);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);
}
