// The JSON schema the structured-output benches constrain to: an order, as a
// customer-service bot fills it (strings, an enum, an array of objects, a boolean).
#pragma once

namespace troupe::bench {

inline constexpr const char* order_schema = R"({"type": "object", "properties": {
  "order_id": {"type": "string", "maxLength": 12},
  "status": {"enum": ["open", "shipped", "delivered", "returned"]},
  "items": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
      "sku": {"type": "string", "maxLength": 10}, "quantity": {"type": "integer", "minimum": 1, "maximum": 99}},
      "required": ["sku", "quantity"], "additionalProperties": false}},
  "refund": {"type": "boolean"}, "note": {"type": "string", "maxLength": 40}},
  "required": ["order_id", "status", "items", "refund"], "additionalProperties": false})";

} // namespace troupe::bench
