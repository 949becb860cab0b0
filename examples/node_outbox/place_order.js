// Places an order: the row in the application's own `orders` table and its record in the
// outbox's `orders` topic, in one PostgreSQL transaction (README, "Appending in your own
// transaction"). Both commit, or neither does.
//
// Once, on the outbox's PostgreSQL database (`outbox` here, migrated): the topic, a role `shop`
// that may append to it, and the application's own table, which `shop` writes:
//
//   export OUTBOX_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/outbox
//   .venv/bin/outbox topics create orders
//   echo "$SHOP_PASSWORD" | .venv/bin/outbox grant-appender shop --topic orders --password-stdin
//   psql -d outbox -c 'CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL)' \
//        -c 'GRANT SELECT, INSERT ON orders TO shop'
//
// Then, in this directory:
//
//   npm install
//   DATABASE_URL=postgresql://shop:$SHOP_PASSWORD@127.0.0.1/outbox node place_order.js 42 1250 [--fail]
//
// --fail throws after the append, before the commit: the transaction rolls back, and neither
// the order nor its record exists.
const { Client } = require("pg");

async function placeOrder(client, id, total, fail) {
  await client.query("BEGIN");
  try {
    await client.query("INSERT INTO orders (id, total) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", [id, total]);
    const { rows } = await client.query(
      "SELECT outbox.append($1, $2, $3, $4::json, message_id => $5) AS appended",
      ["orders", 0, String(id), JSON.stringify({ order: id, total }), `order-${id}-placed`],
    );
    if (fail) throw new Error("failing on purpose, before the commit");
    await client.query("COMMIT");
    return rows[0].appended;
  } catch (err) {
    await client.query("ROLLBACK");
    throw err;
  }
}

// SQLSTATE class 28, invalid authorization: a wrong password, a role that does not exist.
const CREDENTIALS_REFUSED = /^28/;
const HOW = "DATABASE_URL=postgresql://USER:PASSWORD@HOST:5432/DATABASE names the outbox's database and "
  + "the user and password to connect as";

async function main() {
  if (!process.env.DATABASE_URL) {
    console.error(`DATABASE_URL is not set: ${HOW}`);
    process.exit(2);
  }
  const [id, total] = process.argv.slice(2, 4).map(Number);
  const fail = process.argv.includes("--fail");
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  try {
    await client.connect();
  } catch (err) {
    if (CREDENTIALS_REFUSED.test(err.code || "")) err.message += ` (check the user and password: ${HOW})`;
    throw err;
  }
  try {
    const appended = await placeOrder(client, id, total, fail);
    console.log(appended ? `order ${id} placed` : `order ${id} was published before`);
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
