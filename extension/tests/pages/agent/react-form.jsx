// A controlled React form: what #result shows on submit is React's state, so it only holds the
// typed values when typing went through React's onChange (native value setter + input event).

import { useState } from "react";
import { createRoot } from "react-dom/client";

const COUNTRIES = ["Germany", "France", "Italy", "Spain", "United Kingdom", "United States"];

function SignupForm() {
  const [form, setForm] = useState({ name: "", email: "", password: "", address: "", city: "", country: "", subscribe: false, notes: "" });
  const [result, setResult] = useState("");
  const field = (key) => ({
    id: key,
    name: key,
    value: form[key],
    onChange: (e) => setForm({ ...form, [key]: e.target.value }),
  });
  const submit = (e) => {
    e.preventDefault();
    const { password, ...rest } = form;
    setResult(JSON.stringify({ ...rest, password_length: password.length }));
  };
  return (
    <form id="signup" aria-label="Sign up" method="post" action="/signup" onSubmit={submit}>
      <label htmlFor="name">Full name</label>
      <input {...field("name")} autoComplete="name" placeholder="Ada Lovelace" />
      <label htmlFor="email">Email</label>
      <input {...field("email")} type="email" autoComplete="email" />
      <label htmlFor="password">Password</label>
      <input {...field("password")} type="password" autoComplete="new-password" />
      <div className="spacer" />
      <label htmlFor="address">Street address</label>
      <input {...field("address")} autoComplete="street-address" />
      <label htmlFor="city">City</label>
      <input {...field("city")} autoComplete="address-level2" />
      <label htmlFor="country">Country</label>
      <select {...field("country")}>
        <option value="">Choose…</option>
        {COUNTRIES.map((c) => <option key={c} value={c.toLowerCase().replace(/ /g, "-")}>{c}</option>)}
      </select>
      <label>
        <input type="checkbox" name="subscribe" checked={form.subscribe} onChange={(e) => setForm({ ...form, subscribe: e.target.checked })} />
        Subscribe to the newsletter
      </label>
      <label htmlFor="notes">Notes for the team</label>
      <textarea {...field("notes")} rows={3} />
      <div className="spacer" />
      <button type="button" disabled>Save draft</button>
      <button type="submit">Create account</button>
      <pre id="result">{result}</pre>
    </form>
  );
}

createRoot(document.getElementById("root")).render(<SignupForm />);
