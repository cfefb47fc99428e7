// The document_mask train option: its values, its flag, and its check.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/train_config.h"

namespace lt {
namespace {

TEST(DocumentMaskConfig, DefaultsToAutoAndTakesOnOffAsAFlag) {
  TrainConfig cfg;
  EXPECT_EQ(cfg.document_mask, "auto");
  EXPECT_NO_THROW(validate(cfg));
  CLI::App app;
  TrainConfig parsed;
  add_train_flags(app, parsed);
  const char* argv[] = {"train", "--document-mask", "off"};
  app.parse(3, argv);
  apply_given_flags(cfg, parsed, app);
  EXPECT_EQ(cfg.document_mask, "off");
  EXPECT_NE(describe(cfg).find("document_mask: \"off\""), std::string::npos) << describe(cfg);
}

TEST(DocumentMaskConfig, UnknownValueNamesTheChoices) {
  TrainConfig cfg;
  cfg.document_mask = "yes";
  try {
    validate(cfg);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("document_mask"), std::string::npos) << m;
    EXPECT_NE(m.find("on, off or auto"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace lt
